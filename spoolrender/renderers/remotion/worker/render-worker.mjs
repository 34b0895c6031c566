// spoolrender: long-lived Remotion render worker.
//
// Shipped inside the spoolrender Python package and spawned by the runner as
// `node <package>/worker/render-worker.mjs --project DIR --serve-url DIR ...` (never via
// npx), in its own process group, with the Remotion project as its working directory.
// Remotion's packages come from that project's node_modules (project.mjs). One browser
// and one prebuilt bundle are reused for every job; one render runs at a time.
//
// Args:
//   --project DIR                the Remotion project (its node_modules), required
//   --serve-url DIR              prebuilt bundle dir (from bundle.mjs), required
//   --browser-executable PATH    default /usr/bin/chromium (a browser is never downloaded)
//   --log-level error|warn|info|verbose   default error (Remotion's log level)
//
// Protocol: newline-delimited JSON, one object per line, camelCase fields.
// stdin = requests, stdout = events. stdout carries ONLY protocol lines;
// console.log/info/debug/warn and all Remotion logging go to stderr.
//
// Events at startup:
//   {"type":"ready","pid":N,"browserPid":N|null,"remotionVersion":"4.0.529","serveUrl":DIR,
//    "ffprobe":PATH|null}   (the project's own ffprobe, for verifying outputs)
//   {"type":"fatal","kind":"setup"|"error","message":S,"detail":S}  then exit 1
//       kind setup: the project lacks a package or is not a Remotion 4 project; the
//       message names the install command. No retry can fix it.
//
// Requests:
//   {"type":"render","jobId":S,"composition":S,"inputProps":{...},
//    "outputLocation":ABS_PATH,"concurrency":N|null,
//    "options":{codec, crf, proResProfile, ..., chromiumOptions: {gl}}|null,
//    "still":{"frame":N,"imageFormat":"png"|"jpeg"|"webp"|"pdf"}|null}
//       options: the job's settings under Remotion's option names (checked by
//       spoolrender); what they leave out -> the render defaults of the project's
//       remotion.config.ts (read at bundle time), then Remotion's (codec h264).
//       still: renderStill of that frame instead of renderMedia.
//       Events for the job:
//         {"type":"started","jobId","durationInFrames","fps","width","height"}
//         {"type":"progress","jobId","progress":0..1,"renderedFrames","encodedFrames",
//          "stage":"rendering"|"encoding"|"muxing"}   (max ~4/s, final one always)
//         {"type":"done","jobId","outputLocation","durationInFrames","frameCount","fps",
//          "width","height","codec","still":FORMAT|null,"renderMs","stats":{...}}
//      or {"type":"failed","jobId","kind":K,"message":FIRST_LINE,
//          "location":"src/X.tsx:LINE:COL"|null,"detail":FULL_TEXT,"stats":{...}}
//       K: see errors.mjs. A render request while another runs -> failed kind "busy".
//       chunk (optional): {"first","last","compositionStart","framesPerChunk",
//         "audioLocation":ABS_PATH|null} renders frames first..last of a split job as
//         chunks.mjs describes: outputLocation gets the h264-ts video, audioLocation the
//         AAC audio (null, and none written, when the job is muted); "done" then also
//         carries "audioLocation" (the audio part written, or null).
//   {"type":"span","jobId":S,"composition":S,"inputProps":{...},"options":{...}|null}
//       The frames the whole job renders (its frameRange option, else the composition's
//       every frame with these props): no "started" event, then {"type":"done","jobId",
//       "first","last","fps","durationInFrames","width","height"} or failed.
//   {"type":"join", ...}   joins a split job's chunks: see join.mjs.
//       Like renders, one span/join/render at a time ("busy" otherwise); cancel works
//       for all three.
//   {"type":"cancel","jobId":S}   cancels the running job (-> failed kind
//                                 "cancelled"); ignored if that job is not running.
//   {"type":"stats"} -> {"type":"stats","browserLaunches","bundleLoads",
//                        "jobsRendered","jobsFailed"}
//   {"type":"shutdown"} or stdin EOF or SIGTERM/SIGINT: cancel any running job,
//                        close the browser, exit 0.
//   A line that is not valid JSON or has an unknown type ->
//     {"type":"protocol-error","message":S}   (the worker keeps serving)
//
// The worker survives every job failure. If the browser died (crash, kill,
// disconnect) it is closed and reopened before the next render. After a failed or
// cancelled render, `<outputLocation>.*.remotion-in-progress` leftovers and any partial
// outputLocation are deleted. Temp files go to $TMPDIR (set by the caller).

import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import {BrowserHost, checkBrowserPath} from './browser.mjs';
import {RENDER_DEFAULTS_FILE} from './config.mjs';
import {BROWSER_RE, formatDetail} from './errors.mjs';
import {ffprobeOf, loadDependencyOf, openProject} from './project.mjs';
import {emit, firstLine, logErr, parseArgs, stripErrorPrefix, whenStdoutCloses, withTimeout} from './protocol.mjs';
import {runJoin, validateJoin} from './join.mjs';
import {BROWSER_LOSS_GRACE_MS, runRender, runSpan, validateRequest, validateSpanRequest} from './render.mjs';
import {makeSymbolicator} from './symbolicate.mjs';

const ARGS = {
	'--project': 'project',
	'--serve-url': 'serveUrl',
	'--browser-executable': 'browserExecutable',
	'--log-level': 'logLevel',
};

const readArgs = (argv) => {
	const args = parseArgs(argv, ARGS, {
		project: null,
		serveUrl: null,
		browserExecutable: '/usr/bin/chromium',
		logLevel: 'error',
	});
	if (!args.project) throw new Error('Missing required argument --project DIR');
	if (!args.serveUrl) throw new Error('Missing required argument --serve-url DIR');
	if (!['error', 'warn', 'info', 'verbose'].includes(args.logLevel)) {
		throw new Error(`Invalid --log-level ${args.logLevel}; expected error, warn, info or verbose`);
	}
	return args;
};

const loadServeUrl = (dir) => {
	const abs = path.resolve(dir);
	if (!fs.existsSync(path.join(abs, 'index.html'))) {
		throw new Error(`--serve-url ${abs} is not a Remotion bundle (no index.html); build it with bundle.mjs`);
	}
	const defaultsFile = path.join(abs, RENDER_DEFAULTS_FILE);
	const defaults = fs.existsSync(defaultsFile) ? JSON.parse(fs.readFileSync(defaultsFile, 'utf8')) : {};
	return {serveUrl: abs, renderDefaults: defaults.renderMedia ?? {}, chromiumOptions: defaults.chromiumOptions ?? {}};
};

// ---- state ------------------------------------------------------------------
let ctx = null; // see render.mjs
let current = null; // {jobId, phase, cancel, cancelled, cancelReason, browserDiedDuringJob, settled, promise}
let shuttingDown = false;
const stats = {bundleLoads: 0, jobsRendered: 0, jobsFailed: 0};
const statsSnapshot = () => ({browserLaunches: ctx?.host.launches ?? 0, ...stats});

const onBrowserGone = () => {
	if (!current || current.settled) return;
	current.browserDiedDuringJob = true;
	// If Remotion does not notice by itself, give up on the job shortly.
	const job = current;
	setTimeout(() => {
		if (!job.settled && job.cancel) {
			logErr('render still running after the browser was lost; cancelling it');
			job.cancel();
		}
	}, BROWSER_LOSS_GRACE_MS).unref();
};

const refuse = (jobId, kind, message, detail, counted) => {
	if (counted) stats.jobsFailed++;
	emit({type: 'failed', jobId, kind, message, location: null, detail, stats: statsSnapshot()});
};

// A request that occupies the worker until it settles: render, span or join.
const REQUESTS = {
	render: {validate: validateRequest, run: runRender},
	span: {validate: validateSpanRequest, run: runSpan},
	join: {validate: validateJoin, run: runJoin},
};

const handleJob = (req) => {
	const {validate, run} = REQUESTS[req.type];
	const jobId = typeof req.jobId === 'string' ? req.jobId : null;
	if (current && !current.settled) {
		// Not counted in jobsFailed: the job was refused, not attempted.
		refuse(jobId, 'busy', `Worker is busy rendering job ${current.jobId}; send one render at a time`,
			`Render request for job ${jobId} refused: job ${current.jobId} is still running.`, false);
		return;
	}
	const problems = validate(req);
	if (problems.length > 0) {
		refuse(jobId, 'error', `Invalid ${req.type} request: ${problems.join('; ')}`, JSON.stringify(req), true);
		return;
	}
	const job = {jobId: req.jobId, cancel: null, cancelled: false, browserDiedDuringJob: false, settled: false};
	current = job;
	job.promise = run(ctx, req, job).finally(() => {
		job.settled = true;
		if (current === job) current = null;
	});
};

const handleCancel = (req) => {
	if (!current || current.settled || current.jobId !== req.jobId) return; // ignored
	current.cancelled = true;
	if (current.cancel) current.cancel();
};

// ---- shutdown ----------------------------------------------------------------
let shutdownPromise = null;
const shutdown = (why, code = 0) => {
	if (shutdownPromise) return shutdownPromise;
	shuttingDown = true;
	logErr(`shutting down (${why})`);
	shutdownPromise = (async () => {
		const hardExit = setTimeout(() => process.exit(code), 8000);
		hardExit.unref();
		if (current && !current.settled) {
			current.cancelled = true;
			current.cancelReason = 'shutdown';
			if (current.cancel) current.cancel();
			try {
				await withTimeout(current.promise, 2000, 'Cancelling the running render');
			} catch {
				// the hard exit above still bounds the shutdown
			}
		}
		if (ctx) {
			await ctx.host.close();
			ctx.host.reapStrays('shutdown', false);
		}
		process.exit(code);
	})();
	return shutdownPromise;
};
whenStdoutCloses(() => shutdown('stdout closed', 0));

// ---- main --------------------------------------------------------------------
const handleLine = (line) => {
	const trimmed = line.trim();
	if (!trimmed) return;
	let req;
	try {
		req = JSON.parse(trimmed);
	} catch (e) {
		emit({type: 'protocol-error', message: `Request is not valid JSON: ${e.message}`});
		return;
	}
	if (!req || typeof req !== 'object' || Array.isArray(req)) {
		emit({type: 'protocol-error', message: 'Request must be a JSON object'});
		return;
	}
	if (shuttingDown) return;
	switch (req.type) {
		case 'render':
		case 'span':
		case 'join':
			handleJob(req);
			break;
		case 'cancel':
			handleCancel(req);
			break;
		case 'stats':
			emit({type: 'stats', ...statsSnapshot()});
			break;
		case 'shutdown':
			shutdown('shutdown request', 0);
			break;
		default:
			emit({type: 'protocol-error', message: `Unknown request type: ${JSON.stringify(req.type)}`});
	}
};

const start = async () => {
	const args = readArgs(process.argv.slice(2));
	const {serveUrl, renderDefaults, chromiumOptions} = loadServeUrl(args.serveUrl);
	stats.bundleLoads++;
	checkBrowserPath(args.browserExecutable);
	const project = openProject(args.project);
	const [renderer] = project.load('@remotion/renderer');
	const host = new BrowserHost(renderer, {...args, executable: args.browserExecutable, chromiumOptions}, onBrowserGone);
	ctx = {
		args,
		renderer,
		serveUrl,
		host,
		stats,
		statsSnapshot,
		renderDefaults,
		running: () => current && !current.settled,
		symbolicate: makeSymbolicator({
			serveUrl,
			projectDir: project.dir,
			sourceMap: loadDependencyOf(project, '@remotion/renderer', 'source-map'),
		}),
	};
	await host.launch();
	return {serveUrl, remotionVersion: project.remotionVersion, versionWarning: project.versionWarning, browserPid: host.pid, ffprobe: ffprobeOf(project)};
};

const main = async () => {
	process.on('SIGTERM', () => shutdown('SIGTERM', 0));
	process.on('SIGINT', () => shutdown('SIGINT', 0));
	let ready;
	try {
		ready = await start();
	} catch (err) {
		emit({
			type: 'fatal',
			kind: err?.kind ?? 'error',
			message: stripErrorPrefix(firstLine(err?.message ?? err)) || 'Worker failed to start',
			detail: formatDetail(err, null),
		});
		if (ctx) await ctx.host.close();
		process.exit(1);
	}
	emit({type: 'ready', pid: process.pid, ...ready});
	const rl = readline.createInterface({input: process.stdin, crlfDelay: Infinity});
	rl.on('line', handleLine);
	rl.on('close', () => shutdown('stdin closed', 0));
};

// The worker must survive stray errors from a dying browser.
const onStray = (what) => (err) => {
	logErr(`${what}:`, err?.stack ?? err);
	if (ctx && BROWSER_RE.test(String(err?.message ?? err))) ctx.host.markDead(what);
};
process.on('unhandledRejection', onStray('unhandled rejection'));
process.on('uncaughtException', onStray('uncaught exception'));

main();
