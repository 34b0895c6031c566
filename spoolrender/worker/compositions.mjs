// spoolrender: list a bundle's compositions with their default props and props schema.
//
// Usage: node <package>/worker/compositions.mjs --project DIR --serve-url DIR
//            [--browser-executable PATH]
//
// getCompositions() (the project's own @remotion/renderer) gives id, size, fps, duration
// and default props, each as calculateMetadata() resolves them for the default props. It
// does not give the <Composition schema> (a zod object that lives only in the page), so
// before Remotion closes its page we read it there ourselves: the registered compositions
// are the React elements of the page's root, whose props hold the schema. A zod 4 schema
// converts itself (schema.toJSONSchema()); a zod 3 one has no converter inside the page,
// and is reported as such (schema null, schemaNote saying why) rather than guessed.
//
// stdout carries exactly one JSON line:
//   {"type":"compositions","remotionVersion":V,"compositions":[{"id","width","height",
//    "fps","durationInFrames","defaultProps","schema":{...}|null,"schemaNote":S|null}]}  exit 0
//   {"type":"fatal","kind":"setup"|"error","message":FIRST_LINE,"detail":S}             exit 1

import fs from 'node:fs';
import path from 'node:path';
import {checkBrowserPath} from './browser.mjs';
import {RENDER_DEFAULTS_FILE} from './config.mjs';
import {formatDetail, keepBrowserLog, withFetchedUrl} from './errors.mjs';
import {openProject} from './project.mjs';
import {emit, firstLine, logErr, parseArgs, stripErrorPrefix} from './protocol.mjs';

// Runs in the page: the schema of every <Composition>/<Still> element of the React tree.
// Found through the root container's fiber (React 18 and 19 name it __reactContainer$*).
const readSchemasInPage = () => {
	const found = {};
	const roots = [];
	for (const el of document.querySelectorAll('*')) {
		for (const key of Object.keys(el)) {
			if (key.startsWith('__reactContainer$')) roots.push(el[key]);
		}
	}
	const convert = (schema) => {
		if (schema === undefined || schema === null) return {schema: null, schemaNote: null};
		if (typeof schema.toJSONSchema === 'function') {
			try {
				return {schema: schema.toJSONSchema(), schemaNote: null};
			} catch (err) {
				return {schema: null, schemaNote: `the schema cannot be expressed as JSON Schema: ${err?.message ?? err}`};
			}
		}
		const zod3 = schema._def !== undefined && schema._zod === undefined;
		return {
			schema: null,
			schemaNote: zod3
				? 'a zod 3 schema: only zod 4 schemas can be converted to JSON Schema (the runner still validates)'
				: 'not a zod schema that can be converted to JSON Schema',
		};
	};
	const stack = [...roots];
	const seen = new Set();
	while (stack.length > 0) {
		const fiber = stack.pop();
		if (!fiber || seen.has(fiber)) continue;
		seen.add(fiber);
		const props = fiber.memoizedProps;
		if (props && typeof props === 'object' && typeof props.id === 'string' &&
			('component' in props || 'lazyComponent' in props) && !(props.id in found)) {
			found[props.id] = convert(props.schema);
		}
		if (fiber.sibling) stack.push(fiber.sibling);
		if (fiber.child) stack.push(fiber.child);
	}
	return found;
};

// The browser, wrapped so that the page getCompositions() opens is read before it closes.
const schemaReadingBrowser = (browser) => {
	let reading = null;
	const wrapped = Object.create(browser);
	wrapped.newPage = async (...args) => {
		const page = await browser.newPage(...args);
		const close = page.close.bind(page);
		page.close = (...closeArgs) => {
			reading = page.evaluate(readSchemasInPage).catch((err) => ({error: String(err?.message ?? err)}));
			return reading.finally(() => close(...closeArgs));
		};
		return page;
	};
	return {wrapped, schemas: () => reading ?? Promise.resolve({error: 'the page was never closed'})};
};

// The page's console during the listing (errors.mjs keepBrowserLog).
const pageLog = {browserLog: []};

const main = async () => {
	const args = parseArgs(
		process.argv.slice(2),
		{'--project': 'project', '--serve-url': 'serveUrl', '--browser-executable': 'browserExecutable'},
		{project: null, serveUrl: null, browserExecutable: '/usr/bin/chromium'},
	);
	if (!args.project || !args.serveUrl) throw new Error('Usage: node compositions.mjs --project DIR --serve-url DIR');
	const serveUrl = path.resolve(args.serveUrl);
	const defaultsFile = path.join(serveUrl, RENDER_DEFAULTS_FILE);
	const chromiumOptions = fs.existsSync(defaultsFile)
		? (JSON.parse(fs.readFileSync(defaultsFile, 'utf8')).chromiumOptions ?? {})
		: {};
	checkBrowserPath(args.browserExecutable);
	const project = openProject(args.project);
	const [renderer] = project.load('@remotion/renderer');
	const browser = await renderer.openBrowser('chrome', {
		browserExecutable: args.browserExecutable,
		chromeMode: 'headless-shell',
		chromiumOptions,
		logLevel: 'error',
	});
	try {
		const {wrapped, schemas} = schemaReadingBrowser(browser);
		const compositions = await renderer.getCompositions(serveUrl, {
			puppeteerInstance: wrapped,
			browserExecutable: args.browserExecutable,
			chromiumOptions,
			logLevel: 'error',
			// The page's console: what a failed fetch asked for is only said there.
			onBrowserLog: keepBrowserLog(pageLog),
		});
		const found = await schemas();
		const pageError = found.error ? `the schema could not be read from the page: ${found.error}` : null;
		emit({
			type: 'compositions',
			remotionVersion: project.remotionVersion,
			versionWarning: project.versionWarning,
			compositions: compositions.map((c) => ({
				id: c.id,
				width: c.width,
				height: c.height,
				fps: c.fps,
				durationInFrames: c.durationInFrames,
				defaultProps: c.defaultProps ?? {},
				schema: found[c.id]?.schema ?? null,
				schemaNote: found[c.id]?.schemaNote ?? pageError,
			})),
		});
	} finally {
		await browser.close({silent: true}).catch(() => undefined);
	}
};

// A page that failed during the listing rejects its own close too (Target closed):
// logged, so that the listing's real error is the one reported.
process.on('unhandledRejection', (err) => logErr('unhandled rejection:', err?.stack ?? err));

main().then(
	() => process.exit(0), // Remotion's server can leave handles open
	(err) => {
		emit({
			type: 'fatal',
			kind: err?.kind ?? 'error',
			message: withFetchedUrl(stripErrorPrefix(firstLine(err?.message ?? err)) || 'listing the compositions failed', err, pageLog),
			detail: formatDetail(err, null),
		});
		process.exit(1);
	},
);
