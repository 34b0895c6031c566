// spoolrender: long-lived Remotion render worker.
//
// Spawned by the Python runner as `node worker/render-worker.mjs ...` (never via
// npx), in its own process group. One browser and one prebuilt bundle are
// reused for every job; one render runs at a time.
//
// Args:
//   --serve-url DIR              prebuilt bundle dir (from worker/bundle.mjs), required
//   --browser-executable PATH    default /usr/bin/chromium (a browser is never downloaded)
//   --log-level error|warn|info|verbose   default error (Remotion's log level)
//
// Protocol: newline-delimited JSON, one object per line, camelCase fields.
// stdin = requests, stdout = events. stdout carries ONLY protocol lines;
// console.log/info/debug/warn and all Remotion logging go to stderr.
//
// Events at startup:
//   {"type":"ready","pid":N,"browserPid":N|null,"remotionVersion":"4.0.529","serveUrl":DIR}
//   {"type":"fatal","message":S}  then exit 1 (bad args, bundle dir or browser)
//
// Requests:
//   {"type":"render","jobId":S,"composition":S,"inputProps":{...},
//    "outputLocation":ABS_PATH,"concurrency":N|null,"codec":"h264","scale":1,
//    "crf":null|N,"everyNthFrame":1,"frameRange":null|N|[A,B]}
//       absent/null optional fields -> Remotion defaults (codec default h264).
//       Events for the job:
//         {"type":"started","jobId","durationInFrames","fps","width","height"}
//         {"type":"progress","jobId","progress":0..1,"renderedFrames","encodedFrames",
//          "stage":"rendering"|"encoding"|"muxing"}   (max ~4/s, final one always)
//         {"type":"done","jobId","outputLocation","durationInFrames","fps","width",
//          "height","codec","renderMs","stats":{...}}
//      or {"type":"failed","jobId","kind":K,"message":FIRST_LINE,
//          "location":"src/X.tsx:LINE:COL"|null,"detail":FULL_TEXT,"stats":{...}}
//       K: busy | composition-not-found | invalid-props | component-error |
//          cancelled | browser-crashed | no-space | out-of-memory | error
//       A render request while another is running -> failed kind "busy".
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
// disconnect) it is closed and reopened before the next render
// (browserLaunches counts every launch). After a failed or cancelled render,
// `<outputLocation>.*.remotion-in-progress` leftovers and any partial
// outputLocation are deleted. Temp files go to $TMPDIR (set by the caller).

import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import {createRequire} from 'node:module';
import {fileURLToPath} from 'node:url';
import sourceMap from 'source-map';

const {SourceMapConsumer} = sourceMap;

// ---- stdout is reserved for the protocol ------------------------------------
const toStderr = (...args) => console.error(...args);
console.log = toStderr;
console.info = toStderr;
console.debug = toStderr;
console.warn = toStderr;

let stdoutBroken = false;
process.stdout.on('error', () => {
	// Parent went away: nobody to talk to anymore.
	stdoutBroken = true;
	shutdown('stdout closed', 0);
});

const emit = (obj) => {
	if (stdoutBroken) return;
	process.stdout.write(JSON.stringify(obj) + '\n');
};

const logErr = (...args) => {
	process.stderr.write('[render-worker] ' + args.join(' ') + '\n');
};

const here = path.dirname(fileURLToPath(import.meta.url));
const pkgRoot = path.resolve(here, '..');
const require = createRequire(import.meta.url);

// ---- args -------------------------------------------------------------------
const parseArgs = (argv) => {
	const out = {
		serveUrl: null,
		browserExecutable: '/usr/bin/chromium',
		logLevel: 'error',
	};
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const eq = a.indexOf('=');
		const name = eq === -1 ? a : a.slice(0, eq);
		const value = () => {
			if (eq !== -1) return a.slice(eq + 1);
			const v = argv[++i];
			if (v === undefined) throw new Error(`Missing value for ${name}`);
			return v;
		};
		if (name === '--serve-url') out.serveUrl = value();
		else if (name === '--browser-executable') out.browserExecutable = value();
		else if (name === '--log-level') out.logLevel = value();
		else throw new Error(`Unknown argument: ${a}`);
	}
	if (!out.serveUrl) throw new Error('Missing required argument --serve-url DIR');
	if (!['error', 'warn', 'info', 'verbose'].includes(out.logLevel)) {
		throw new Error(
			`Invalid --log-level ${out.logLevel}; expected error, warn, info or verbose`,
		);
	}
	return out;
};

// ---- state ------------------------------------------------------------------
let args;
let renderer; // @remotion/renderer module
let remotionVersion = null;
let serveUrl = null;
let browser = null;
let browserPid = null; // pid of our Chromium browser process (from DevTools)
let browserDead = false;
let shuttingDown = false;
let current = null; // {jobId, phase, cancel, cancelled, cancelReason, browserDiedDuringJob, settled, promise}
// After the browser dies mid-render, Remotion 4.0.529 launches a replacement
// browser of its own and then hangs; we cancel the render after this grace.
const BROWSER_LOSS_GRACE_MS = 3000;
const stats = {browserLaunches: 0, bundleLoads: 0, jobsRendered: 0, jobsFailed: 0};
const statsSnapshot = () => ({...stats});

const firstLine = (s) => {
	const lines = String(s ?? '')
		.split('\n')
		.map((l) => l.trim())
		.filter(Boolean);
	return lines[0] ?? '';
};

const withTimeout = (promise, ms, label) =>
	new Promise((resolve, reject) => {
		const t = setTimeout(() => reject(new Error(`${label} timed out after ${ms} ms`)), ms);
		promise.then(
			(v) => {
				clearTimeout(t);
				resolve(v);
			},
			(e) => {
				clearTimeout(t);
				reject(e);
			},
		);
	});

// ---- serve url (bundle) ------------------------------------------------------
const loadServeUrl = (dir) => {
	const abs = path.resolve(dir);
	if (!fs.existsSync(path.join(abs, 'index.html'))) {
		throw new Error(
			`--serve-url ${abs} is not a Remotion bundle (no index.html); build it with: node worker/bundle.mjs --out ${abs}`,
		);
	}
	stats.bundleLoads++;
	return abs;
};

// ---- browser -----------------------------------------------------------------
const checkBrowserPath = (p) => {
	// Must run before openBrowser: a failed path check inside openBrowser
	// poisons every later openBrowser call in this process.
	if (!path.isAbsolute(p)) {
		throw new Error(`--browser-executable must be an absolute path, got '${p}'`);
	}
	if (!fs.existsSync(p)) {
		throw new Error(
			`Browser executable '${p}' does not exist (install it with: apt-get install chromium)`,
		);
	}
	try {
		fs.accessSync(p, fs.constants.X_OK);
	} catch {
		throw new Error(`Browser executable '${p}' is not executable`);
	}
};

const launchBrowser = async () => {
	checkBrowserPath(args.browserExecutable);
	stats.browserLaunches++;
	const b = await renderer.openBrowser('chrome', {
		browserExecutable: args.browserExecutable,
		chromeMode: 'headless-shell',
		logLevel: args.logLevel,
	});
	browser = b;
	browserDead = false;
	browserPid = null;
	try {
		const info = await withTimeout(b.connection.send('SystemInfo.getProcessInfo'), 5000, 'SystemInfo.getProcessInfo');
		const main = info?.value?.processInfo?.find((p) => p.type === 'browser');
		if (main && Number.isInteger(main.id)) browserPid = main.id;
	} catch (e) {
		logErr('could not get browser pid:', e?.message ?? e);
	}
	// Notice a dead browser (crash / kill) as soon as its DevTools socket closes.
	try {
		const ws = b.connection?.transport?.websocket;
		if (ws && typeof ws.on === 'function') {
			ws.on('close', () => {
				if (browser === b && !shuttingDown) onBrowserGone('DevTools connection closed');
			});
		}
	} catch (e) {
		logErr('could not watch browser connection:', e?.message ?? e);
	}
	return b;
};

const onBrowserGone = (why) => {
	if (browserDead) return;
	browserDead = true;
	logErr(`browser disconnected (${why})`);
	if (current && !current.settled) {
		current.browserDiedDuringJob = true;
		// If Remotion does not notice by itself, give up on the job shortly.
		const job = current;
		setTimeout(() => {
			if (!job.settled && job.cancel) {
				logErr('render still running after browser loss; cancelling it');
				job.cancel();
			}
		}, BROWSER_LOSS_GRACE_MS).unref();
	}
};

const closeBrowser = async (b) => {
	if (!b) return;
	try {
		await withTimeout(b.close({silent: true}), 5000, 'Closing the browser');
	} catch (e) {
		logErr('closing browser failed:', e?.message ?? e);
	}
};

const browserHealthy = async () => {
	if (!browser || browserDead) return false;
	try {
		await withTimeout(browser.connection.send('Browser.getVersion'), 5000, 'Browser health check');
		return true;
	} catch (e) {
		logErr('browser health check failed:', e?.message ?? e);
		return false;
	}
};

const ensureBrowser = async () => {
	if (await browserHealthy()) return;
	const old = browser;
	browser = null;
	browserPid = null;
	browserDead = true;
	await closeBrowser(old);
	reapStrays('before relaunching the browser');
	await launchBrowser();
};

// ---- stray child processes ------------------------------------------------------
// When the browser dies mid-render, Remotion's own replacement browser and the
// job's ffmpeg can outlive the failed render. We SIGKILL such direct children
// (Chromium that is not our current browser; ffmpeg only while no job runs).
const directChildren = () => {
	const out = [];
	let names = [];
	try {
		names = fs.readdirSync('/proc');
	} catch {
		return out;
	}
	for (const name of names) {
		if (!/^\d+$/.test(name)) continue;
		try {
			const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
			const close = stat.lastIndexOf(')');
			const comm = stat.slice(stat.indexOf('(') + 1, close);
			const ppid = Number(stat.slice(close + 2).split(' ')[1]);
			if (ppid === process.pid) out.push({pid: Number(name), comm});
		} catch {
			// process went away
		}
	}
	return out;
};

const reapStrays = (why) => {
	const jobRunning = Boolean(current && !current.settled);
	for (const {pid, comm} of directChildren()) {
		const isBrowser = /chrom|headless/i.test(comm);
		const isFfmpeg = /ffmpeg|ffprobe/i.test(comm);
		if ((isBrowser && pid !== browserPid) || (isFfmpeg && !jobRunning)) {
			try {
				process.kill(pid, 'SIGKILL');
				logErr(`killed stray ${comm} ${pid} (${why})`);
			} catch {
				// already gone
			}
		}
	}
};

// ---- error location (source maps of the local bundle) -------------------------
// Remotion 4.0.529 hands back a SymbolicateableError whose `stackFrame` array
// points into http://localhost:PORT/bundle.js (0-based line/column from the
// DevTools protocol); its own symbolication needs the (by then closed) server.
// We map those frames with the bundle's .js.map files in serveUrl instead.
const sourceMapCache = new Map(); // abs .js path -> Promise<SourceMapConsumer|null>

const loadSourceMap = (jsPath) => {
	if (!sourceMapCache.has(jsPath)) {
		sourceMapCache.set(
			jsPath,
			(async () => {
				const mapPath = jsPath + '.map';
				if (!fs.existsSync(mapPath)) return null;
				const raw = JSON.parse(fs.readFileSync(mapPath, 'utf8'));
				return await new SourceMapConsumer(raw);
			})().catch((e) => {
				logErr('could not load source map for', jsPath, e?.message ?? e);
				return null;
			}),
		);
	}
	return sourceMapCache.get(jsPath);
};

const bundleFileForUrl = (url) => {
	try {
		const u = new URL(url);
		if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
		const rel = decodeURIComponent(u.pathname).replace(/^\/+/, '');
		if (!rel.endsWith('.js')) return null;
		const abs = path.resolve(serveUrl, rel);
		if (!abs.startsWith(serveUrl + path.sep)) return null;
		return fs.existsSync(abs) ? abs : null;
	} catch {
		return null;
	}
};

// Frames as {functionName, url, line (1-based), column (1-based)}.
const rawFrames = (err) => {
	if (Array.isArray(err?.stackFrame) && err.stackFrame.length > 0) {
		return err.stackFrame
			.filter((f) => f && f.fileName && f.lineNumber != null)
			.map((f) => ({
				functionName: f.functionName ?? null,
				url: f.fileName,
				line: f.lineNumber + 1,
				column: (f.columnNumber ?? 0) + 1,
			}));
	}
	const frames = [];
	for (const m of String(err?.stack ?? '').matchAll(
		/at (?:(.+?) \()?(https?:\/\/[^\s)]+?):(\d+):(\d+)\)?/g,
	)) {
		frames.push({functionName: m[1] ?? null, url: m[2], line: Number(m[3]), column: Number(m[4])});
	}
	return frames;
};

const cleanSourceName = (source) => {
	let f = String(source)
		.replace(/^webpack:\/\/[^/]*\//, '')
		.replace(/^file:\/\//, '')
		.replace(/^(\.\/)+/, '');
	if (path.isAbsolute(f)) {
		const rel = path.relative(pkgRoot, f);
		if (!rel.startsWith('..')) f = rel;
	}
	return f;
};

// -> {location: "src/X.tsx:L:C" | null, mappedStack: string | null}
const symbolicate = async (err) => {
	const frames = rawFrames(err);
	if (frames.length === 0) return {location: null, mappedStack: null};
	const lines = [];
	let location = null;
	for (const fr of frames) {
		let text = `${fr.url}:${fr.line}:${fr.column}`;
		const file = bundleFileForUrl(fr.url);
		const consumer = file ? await loadSourceMap(file) : null;
		if (consumer) {
			const pos = consumer.originalPositionFor({line: fr.line, column: fr.column - 1});
			if (pos && pos.source && pos.line != null) {
				const src = cleanSourceName(pos.source);
				const loc = `${src}:${pos.line}:${(pos.column ?? 0) + 1}`;
				text = loc;
				if (!location && !/node_modules/.test(src)) location = loc;
			}
		}
		lines.push(`    at ${fr.functionName ?? '(anonymous)'} (${text})`);
	}
	return {location, mappedStack: lines.join('\n')};
};

// ---- error classification ----------------------------------------------------
const stripErrorPrefix = (s) => String(s).replace(/^(?:Uncaught )?(?:[A-Z][A-Za-z]*Error|Error): /, '');

const formatDetail = (err, mappedStack) => {
	const parts = [];
	const stack = err?.stack ? String(err.stack) : String(err?.message ?? err);
	if (err?.message && !stack.includes(String(err.message))) parts.push(String(err.message));
	parts.push(stack);
	if (mappedStack) parts.push('Source-mapped stack:\n' + mappedStack);
	if (err?.frame != null) parts.push(`Frame: ${err.frame}`);
	return parts.join('\n');
};

const BROWSER_RE =
	/Target closed|Browser closed|Browser has disconnected|browser (has )?disconnected|Protocol error|Session closed|Connection closed|WebSocket is not open|Failed to launch the browser|Page crashed|Navigation failed because browser/i;

const isPropsValidationError = (msg) => /Invalid props for /.test(msg);

const classify = (err, job) => {
	const msg = String(err?.message ?? err ?? '');
	const text = `${msg}\n${err?.stack ?? ''}`;
	const code = err?.code;
	if (job?.cancelled && !job.browserDiedDuringJob) return 'cancelled';
	if (code === 'ENOSPC' || /ENOSPC|No space left on device/i.test(text)) return 'no-space';
	if (code === 'ENOMEM' || /ENOMEM|Cannot allocate memory|JavaScript heap out of memory/i.test(text))
		return 'out-of-memory';
	// Could not (re)start the browser for this job, or it died during the job.
	if (job?.phase === 'browser' || job?.browserDiedDuringJob) return 'browser-crashed';
	if (/Could not find composition with ID/i.test(msg)) return 'composition-not-found';
	if (isPropsValidationError(msg)) return 'invalid-props';
	if (BROWSER_RE.test(msg)) return 'browser-crashed';
	if (/got cancelled/i.test(msg)) return 'cancelled';
	if (Array.isArray(err?.stackFrame) || Array.isArray(err?.symbolicatedStackFrames) ||
		/An error occurred while rendering frame/i.test(msg) || /https?:\/\/[^\s]+\/[^\s]*\.js:\d+/.test(String(err?.stack ?? '')))
		return 'component-error';
	return 'error';
};

const friendlyMessage = ({kind, err, job, request, location}) => {
	const first = stripErrorPrefix(firstLine(err?.message ?? err)) || 'Render failed';
	switch (kind) {
		case 'cancelled':
			return job.cancelReason === 'shutdown'
				? `Render of job ${job.jobId} was cancelled because the worker is shutting down`
				: `Render of job ${job.jobId} was cancelled`;
		case 'browser-crashed':
			if (job.phase === 'browser') {
				return `Could not start the browser ${args.browserExecutable}: ${first}`;
			}
			if (job.browserDiedDuringJob) {
				const why = /got cancelled/i.test(first) ? '' : ` (${first})`;
				return `The browser (${args.browserExecutable}) crashed or was killed during the render; it is restarted for the next job${why}`;
			}
			return `The browser failed during the render (${first}); it is restarted for the next job`;
		case 'component-error': {
			const where = err?.frame != null ? ` at frame ${err.frame}` : '';
			const at = location ? ` (${location})` : '';
			return `${request.composition} threw${where}: ${first}${at}`;
		}
		case 'no-space':
			return `No space left on device while rendering ${request?.outputLocation ?? ''}: ${first}`;
		case 'out-of-memory':
			return `Out of memory while rendering: ${first}`;
		default:
			return first;
	}
};

// ---- cleanup -----------------------------------------------------------------
const cleanupOutput = (outputLocation) => {
	if (!outputLocation) return;
	try {
		const dir = path.dirname(outputLocation);
		const base = path.basename(outputLocation);
		if (fs.existsSync(dir)) {
			for (const name of fs.readdirSync(dir)) {
				if (name.startsWith(base + '.') && name.endsWith('.remotion-in-progress')) {
					fs.rmSync(path.join(dir, name), {recursive: true, force: true});
				}
			}
		}
		fs.rmSync(outputLocation, {force: true});
	} catch (e) {
		logErr('cleanup failed:', e?.message ?? e);
	}
};

// ---- render ------------------------------------------------------------------
const optional = (v) => (v === null || v === undefined ? undefined : v);

const validateRequest = (req) => {
	const problems = [];
	if (typeof req.jobId !== 'string' || req.jobId === '') problems.push('jobId must be a non-empty string');
	if (typeof req.composition !== 'string' || req.composition === '')
		problems.push('composition must be a non-empty string');
	if (typeof req.outputLocation !== 'string' || !path.isAbsolute(req.outputLocation))
		problems.push('outputLocation must be an absolute path');
	if (req.inputProps != null && (typeof req.inputProps !== 'object' || Array.isArray(req.inputProps)))
		problems.push('inputProps must be an object');
	return problems;
};

const runRender = async (req, job) => {
	const t0 = Date.now();
	let composition = null;
	const inputProps = req.inputProps ?? {};
	const codec = req.codec ?? 'h264';
	try {
		job.phase = 'browser';
		await ensureBrowser();
		if (job.cancelled) throw new Error('Render was cancelled before it started');
		job.phase = 'select';

		composition = await renderer.selectComposition({
			serveUrl,
			id: req.composition,
			inputProps,
			puppeteerInstance: browser,
			browserExecutable: args.browserExecutable,
			logLevel: args.logLevel,
		});
		if (job.cancelled) throw new Error('Render was cancelled before it started');

		emit({
			type: 'started',
			jobId: req.jobId,
			durationInFrames: composition.durationInFrames,
			fps: composition.fps,
			width: composition.width,
			height: composition.height,
		});

		let totalFrames = composition.durationInFrames;
		let lastEmit = 0;
		let lastSent = null;
		let latest = null;
		const progressEvent = (p) => ({
			type: 'progress',
			jobId: req.jobId,
			progress: Math.max(0, Math.min(1, p.progress)),
			renderedFrames: p.renderedFrames,
			encodedFrames: p.encodedFrames,
			stage:
				p.stitchStage === 'muxing'
					? 'muxing'
					: p.renderedFrames < totalFrames
						? 'rendering'
						: 'encoding',
		});

		job.phase = 'render';
		const {cancelSignal, cancel} = renderer.makeCancelSignal();
		job.cancel = cancel;
		if (job.cancelled) cancel();

		const renderOptions = {
			composition,
			serveUrl,
			codec,
			inputProps,
			outputLocation: req.outputLocation,
			puppeteerInstance: browser,
			browserExecutable: args.browserExecutable,
			cancelSignal,
			overwrite: true,
			logLevel: args.logLevel,
			onStart: (d) => {
				if (d && typeof d.frameCount === 'number') totalFrames = d.frameCount;
			},
			onProgress: (p) => {
				latest = p;
				const now = Date.now();
				if (now - lastEmit >= 250 || p.progress >= 1) {
					lastEmit = now;
					lastSent = p;
					emit(progressEvent(p));
				}
			},
		};
		for (const [k, v] of Object.entries({
			concurrency: optional(req.concurrency),
			scale: optional(req.scale),
			crf: optional(req.crf),
			everyNthFrame: optional(req.everyNthFrame),
			frameRange: optional(req.frameRange),
		})) {
			if (v !== undefined) renderOptions[k] = v;
		}

		await renderer.renderMedia(renderOptions);
		if (latest && latest !== lastSent) emit(progressEvent(latest));

		job.settled = true;
		stats.jobsRendered++;
		emit({
			type: 'done',
			jobId: req.jobId,
			outputLocation: req.outputLocation,
			durationInFrames: composition.durationInFrames,
			fps: composition.fps,
			width: composition.width,
			height: composition.height,
			codec,
			renderMs: Date.now() - t0,
			stats: statsSnapshot(),
		});
	} catch (err) {
		const kind = classify(err, job);
		if (kind === 'browser-crashed') {
			browserDead = true;
			reapStrays('after browser crash');
			for (const ms of [5000, 15000]) {
				setTimeout(() => reapStrays('after browser crash'), ms).unref();
			}
		}
		cleanupOutput(req.outputLocation);
		let sym = {location: null, mappedStack: null};
		if (kind === 'component-error' || kind === 'invalid-props' || kind === 'error') {
			try {
				sym = await symbolicate(err);
			} catch (e) {
				logErr('symbolication failed:', e?.message ?? e);
			}
		}
		const location = kind === 'component-error' ? sym.location : null;
		stats.jobsFailed++;
		job.settled = true;
		emit({
			type: 'failed',
			jobId: req.jobId,
			kind,
			message: friendlyMessage({kind, err, job, request: req, location}),
			location,
			detail:
				(job.browserDiedDuringJob
					? `The browser's DevTools connection closed during the render; the render was cancelled ${BROWSER_LOSS_GRACE_MS} ms later if it had not failed by itself.\n`
					: '') + formatDetail(err, sym.mappedStack),
			stats: statsSnapshot(),
		});
	}
};

const handleRender = (req) => {
	const jobId = typeof req.jobId === 'string' ? req.jobId : null;
	if (current && !current.settled) {
		// Not counted in jobsFailed: the job was refused, not attempted.
		emit({
			type: 'failed',
			jobId,
			kind: 'busy',
			message: `Worker is busy rendering job ${current.jobId}; send one render at a time`,
			location: null,
			detail: `Render request for job ${jobId} refused: job ${current.jobId} is still running.`,
			stats: statsSnapshot(),
		});
		return;
	}
	const problems = validateRequest(req);
	if (problems.length > 0) {
		stats.jobsFailed++;
		emit({
			type: 'failed',
			jobId,
			kind: 'error',
			message: `Invalid render request: ${problems.join('; ')}`,
			location: null,
			detail: JSON.stringify(req),
			stats: statsSnapshot(),
		});
		return;
	}
	const job = {
		jobId: req.jobId,
		cancel: null,
		cancelled: false,
		browserDiedDuringJob: false,
		settled: false,
	};
	current = job;
	job.promise = runRender(req, job).finally(() => {
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
				// ignore
			}
		}
		await closeBrowser(browser);
		browser = null;
		browserPid = null;
		reapStrays('shutdown');
		process.exit(code);
	})();
	return shutdownPromise;
};

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
			handleRender(req);
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

const main = async () => {
	process.on('SIGTERM', () => shutdown('SIGTERM', 0));
	process.on('SIGINT', () => shutdown('SIGINT', 0));
	try {
		args = parseArgs(process.argv.slice(2));
		serveUrl = loadServeUrl(args.serveUrl);
		checkBrowserPath(args.browserExecutable);
		renderer = await import('@remotion/renderer');
		try {
			remotionVersion = require('remotion/package.json').version;
		} catch {
			remotionVersion = null;
		}
		await launchBrowser();
	} catch (err) {
		emit({
			type: 'fatal',
			message: stripErrorPrefix(firstLine(err?.message ?? err)) || 'Worker failed to start',
			detail: formatDetail(err, null),
		});
		await closeBrowser(browser);
		process.exit(1);
	}

	emit({type: 'ready', pid: process.pid, browserPid, remotionVersion, serveUrl});

	const rl = readline.createInterface({input: process.stdin, crlfDelay: Infinity});
	rl.on('line', handleLine);
	rl.on('close', () => shutdown('stdin closed', 0));
};

// The worker must survive stray errors from a dying browser.
process.on('unhandledRejection', (reason) => {
	logErr('unhandled rejection:', reason?.stack ?? reason);
	if (BROWSER_RE.test(String(reason?.message ?? reason))) onBrowserGone('unhandled rejection');
});
process.on('uncaughtException', (err) => {
	logErr('uncaught exception:', err?.stack ?? err);
	if (BROWSER_RE.test(String(err?.message ?? err))) onBrowserGone('uncaught exception');
});

main();
