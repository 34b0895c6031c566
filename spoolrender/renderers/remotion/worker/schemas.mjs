// spoolrender: the compositions' zod schemas, read and called in the bundle's own page.
//
// A <Composition schema> is a zod object that lives only in the page: Remotion's renderer
// neither returns nor applies it (`npx remotion render` renders any props). Remotion
// Studio validates props by calling the schema itself (safeParse, zod 3 or 4); so does
// spoolrender, in the page Remotion's getCompositions()/selectComposition() opens, read
// just before Remotion closes it: the registered compositions are the React elements of
// the page's root, whose props hold the schema and the default props.

import fs from 'node:fs';
import path from 'node:path';
import {checkBrowserPath} from './browser.mjs';
import {RENDER_DEFAULTS_FILE} from './config.mjs';
import {openProject} from './project.mjs';

// The project's @remotion/renderer and a browser for opening the bundle at args.serveUrl
// with the GL backend and other browser options of its remotion.config.ts.
export const openOnBundle = async (args) => {
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
	return {serveUrl, chromiumOptions, project, renderer, browser};
};

// Runs in the page (serialized: self-contained). Without `check`, for every
// <Composition>/<Still> element its JSON Schema for display (zod 4 converts itself; zod 3
// has no converter in the page); with `check` ({id, props}), that composition's safeParse(Async)
// of its default props with `check.props` over them, as Remotion merges them for the
// component.
// Found through the root container's fiber (React 18 and 19 name it __reactContainer$*).
const inspectInPage = async (check) => {
	const found = {};
	let checked = null;
	let target = null; // the props of the checked composition's element
	const roots = [];
	for (const el of document.querySelectorAll('*')) {
		for (const key of Object.keys(el)) {
			if (key.startsWith('__reactContainer$')) roots.push(el[key]);
		}
	}
	const convert = (schema) => {
		if (schema === undefined || schema === null) return {schema: null, schemaNote: null, hasSchema: false};
		const callable = typeof schema.safeParse === 'function';
		if (typeof schema.toJSONSchema === 'function') {
			try {
				// Input mode: what a job may give (zod's default output mode closes a plain z.object,
				// which strips unknown keys, and requires fields that have a .default()).
				return {schema: schema.toJSONSchema({io: 'input'}), schemaNote: null, hasSchema: callable};
			} catch (err) {
				return {
					schema: null,
					schemaNote: `the schema cannot be expressed as JSON Schema (props are still checked with it): ${err?.message ?? err}`,
					hasSchema: callable,
				};
			}
		}
		const zod3 = schema._def !== undefined && schema._zod === undefined;
		return {
			schema: null,
			schemaNote: zod3
				? 'a zod 3 schema: only zod 4 schemas can be shown as JSON Schema (props are still checked with it)'
				: 'not a zod schema that can be shown as JSON Schema',
			hasSchema: callable,
		};
	};
	// zod's issue path (keys and indices) as props.a.b[0].
	const where = (path) =>
		(path ?? []).reduce((at, key) => (typeof key === 'number' ? `${at}[${key}]` : `${at}.${String(key)}`), 'props');
	// safeParseAsync where there is one (zod 3 and 4): a schema with an async refinement
	// throws in safeParse ("Encountered Promise during synchronous parse") but accepts props.
	const validate = async (schema, defaultProps) => {
		if (!schema || typeof schema.safeParse !== 'function') return {hasSchema: false, issues: []};
		const merged = {...(defaultProps ?? {}), ...(check.props ?? {})};
		const result =
			typeof schema.safeParseAsync === 'function' ? await schema.safeParseAsync(merged) : schema.safeParse(merged);
		if (result.success) return {hasSchema: true, issues: []};
		const issues = result.error?.issues ?? [];
		return {
			hasSchema: true,
			issues: issues.length > 0
				? issues.map((i) => ({path: where(i.path), message: String(i.message)}))
				: [{path: 'props', message: String(result.error?.message ?? result.error)}],
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
			found[props.id] = check ? {} : convert(props.schema); // a check needs no JSON Schema
			if (check && check.id === props.id) target = props;
		}
		if (fiber.sibling) stack.push(fiber.sibling);
		if (fiber.child) stack.push(fiber.child);
	}
	if (target !== null) {
		try {
			checked = await validate(target.schema, target.defaultProps);
		} catch (err) {
			checked = {error: `the schema threw: ${err?.message ?? err}`};
		}
	}
	return {found, checked};
};

// `browser` wrapped so that the first page Remotion opens on it is inspected (with
// `check`, see inspectInPage) before it closes. result() settles once that page closed:
// {found, checked} or {error}. Remotion closes the page after its own promise settled,
// without waiting: await result() after it.
export const inspectingBrowser = (browser, check = null) => {
	let opened = false;
	let reading = null;
	const wrapped = Object.create(browser);
	wrapped.newPage = async (...args) => {
		const page = await browser.newPage(...args);
		if (opened) return page;
		opened = true;
		const close = page.close.bind(page);
		page.close = (...closeArgs) => {
			reading = page.evaluate(inspectInPage, check).catch((err) => ({error: String(err?.message ?? err)}));
			return reading.finally(() => close(...closeArgs));
		};
		return page;
	};
	// Remotion closes its page in a cleanup after its promise settled: wait for that close.
	const result = async () => {
		for (let i = 0; opened && reading === null && i < 250; i++) await new Promise((r) => setTimeout(r, 20));
		return reading ?? {error: opened ? 'the page was never closed' : 'no page was opened'};
	};
	return {wrapped, result};
};

// Props that break a schema: carries every problem ({path, message}); kind invalid-props.
export class InvalidProps extends Error {
	constructor(composition, problems) {
		super(`Invalid props for ${composition}: ${problems.map((p) => `${p.path}: ${p.message}`.replace(/\s+/g, ' ')).join('; ')}`);
		this.problems = problems;
	}
}
