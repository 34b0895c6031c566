// spoolrender: check a job's props with its composition's own schema, in the bundle's page.
//
// Usage: node <package>/worker/check-props.mjs --project DIR --serve-url DIR
//            --composition ID [--browser-executable PATH] [--timeout-ms N]   (props: JSON on stdin)
//
// What `submit` runs on the project's cached bundle: the project's own @remotion/renderer
// opens the composition (selectComposition, calculateMetadata for the default props: the
// job's props are not trusted before they pass), and the composition's zod schema (3 or
// 4) is called on the default props with the job's props over them (schemas.mjs), as
// Remotion Studio does. The render worker repeats the check before the first frame.
//
// stdout carries exactly one JSON line:
//   {"type":"props","hasSchema":B,"problems":[{"path":"props.a[0]","message":S}]}  exit 0
//   {"type":"fatal","kind":"setup"|"error","message":FIRST_LINE,"detail":S}          exit 1

import fs from 'node:fs';
import {runWorkerMain} from './errors.mjs';
import {emit, parseArgs} from './protocol.mjs';
import {inspectingBrowser, openOnBundle} from './schemas.mjs';

const main = async () => {
	const args = parseArgs(
		process.argv.slice(2),
		{
			'--project': 'project',
			'--serve-url': 'serveUrl',
			'--composition': 'composition',
			'--browser-executable': 'browserExecutable',
			'--timeout-ms': 'timeoutMs',
		},
		{project: null, serveUrl: null, composition: null, browserExecutable: '/usr/bin/chromium', timeoutMs: '30000'},
	);
	if (!args.project || !args.serveUrl || !args.composition)
		throw new Error('Usage: node check-props.mjs --project DIR --serve-url DIR --composition ID < props.json');
	const props = JSON.parse(fs.readFileSync(0, 'utf8'));
	const {serveUrl, chromiumOptions, renderer, browser} = await openOnBundle(args);
	try {
		const {wrapped, result} = inspectingBrowser(browser, {id: args.composition, props});
		await renderer.selectComposition({
			serveUrl,
			id: args.composition,
			inputProps: {},
			puppeteerInstance: wrapped,
			browserExecutable: args.browserExecutable,
			chromiumOptions,
			logLevel: 'error',
			// Remotion's own default (30 s for the page to come up) is too short on a busy host.
			timeoutInMilliseconds: Number(args.timeoutMs),
		});
		const inspected = await result();
		if (inspected.error || inspected.checked?.error) throw new Error(inspected.error ?? inspected.checked.error);
		const checked = inspected.checked ?? {hasSchema: false, issues: []};
		emit({type: 'props', hasSchema: checked.hasSchema, problems: checked.issues});
	} finally {
		await browser.close({silent: true}).catch(() => undefined);
	}
};

runWorkerMain(main, (err, first) => first || 'checking the props failed');
