// spoolrender: list a bundle's compositions with their default props and props schema.
//
// Usage: node <package>/worker/compositions.mjs --project DIR --serve-url DIR
//            [--browser-executable PATH]
//
// getCompositions() (the project's own @remotion/renderer) gives id, size, fps, duration
// and default props, each as calculateMetadata() resolves them for the default props. It
// does not give the <Composition schema> (a zod object that lives only in the page), so
// before Remotion closes its page we read it there ourselves (schemas.mjs). A zod 4
// schema converts itself to JSON Schema (schema.toJSONSchema()), for display only; a zod 3
// one has no converter inside the page (schema null, schemaNote saying why). Either is
// what props are checked with (hasSchema; check-props.mjs and the render worker).
//
// stdout carries exactly one JSON line:
//   {"type":"compositions","remotionVersion":V,"compositions":[{"id","width","height",
//    "fps","durationInFrames","defaultProps","schema":{...}|null,"schemaNote":S|null,
//    "hasSchema":B|null}]}                                                                exit 0
//   {"type":"fatal","kind":"setup"|"error","message":FIRST_LINE,"detail":S}             exit 1

import {keepBrowserLog, runWorkerMain, withFetchedUrl} from './errors.mjs';
import {emit, parseArgs} from './protocol.mjs';
import {inspectingBrowser, openOnBundle} from './schemas.mjs';

// The page's console during the listing (errors.mjs keepBrowserLog).
const pageLog = {browserLog: []};

const main = async () => {
	const args = parseArgs(
		process.argv.slice(2),
		{'--project': 'project', '--serve-url': 'serveUrl', '--browser-executable': 'browserExecutable'},
		{project: null, serveUrl: null, browserExecutable: '/usr/bin/chromium'},
	);
	if (!args.project || !args.serveUrl) throw new Error('Usage: node compositions.mjs --project DIR --serve-url DIR');
	const {serveUrl, chromiumOptions, project, renderer, browser} = await openOnBundle(args);
	try {
		const {wrapped, result} = inspectingBrowser(browser);
		const compositions = await renderer.getCompositions(serveUrl, {
			puppeteerInstance: wrapped,
			browserExecutable: args.browserExecutable,
			chromiumOptions,
			logLevel: 'error',
			// The page's console: what a failed fetch asked for is only said there.
			onBrowserLog: keepBrowserLog(pageLog),
		});
		const inspected = await result();
		const found = inspected.found ?? {};
		const pageError = inspected.error ? `the schema could not be read from the page: ${inspected.error}` : null;
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
				// Whether props are checked with the composition's schema (zod 3 or 4): unknown
				// (null) when the page could not be read.
				hasSchema: found[c.id]?.hasSchema ?? (pageError ? null : false),
			})),
		});
	} finally {
		await browser.close({silent: true}).catch(() => undefined);
	}
};

runWorkerMain(main, (err, first) => withFetchedUrl(first || 'listing the compositions failed', err, pageLog));
