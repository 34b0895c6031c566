// spoolrender: classify a failed render and say what happened in one line (and end the
// one-shot scripts with it: runWorkerMain).
//
// Kinds: busy | composition-not-found | invalid-props | component-error | cancelled |
// browser-crashed | no-space | out-of-memory | no-webgl | error (and setup for start-up failures;
// invalid-settings, from render.mjs, for frames the composition does not have).

import {emit, firstLine, logErr, stripErrorPrefix} from './protocol.mjs';

// The job asks for frames or options the composition cannot render (kind invalid-settings):
// no retry can fix it.
export class InvalidSettings extends Error {}

export const BROWSER_RE =
	/Target closed|Browser closed|Browser has disconnected|browser (has )?disconnected|Protocol error|Session closed|Connection closed|WebSocket is not open|Failed to launch the browser|Page crashed|Navigation failed because browser/i;

// Memory exhaustion in Node, V8, Chromium, ffmpeg or the OS. Checked before the browser
// patterns: a tab killed for memory also closes its target.
export const MEMORY_RE =
	/JavaScript heap out of memory|Reached heap limit|Allocation failed|ENOMEM|Cannot allocate memory|Out of memory|std::bad_alloc|Array buffer allocation failed/i;

// The line of `text` that tells the memory story, or null.
export const memoryLine = (text) =>
	String(text ?? '')
		.split('\n')
		.map((l) => l.trim())
		.find((l) => MEMORY_RE.test(l)) ?? null;

// The page could not get a WebGL context: CanvasKit (Skia) logs "failed to create webgl
// context: err 0", Three.js throws "Error creating WebGL context.". On a headless host
// `gl: angle` (Skia's and Three's starters set it) has none; swangle (SwiftShader under
// ANGLE) renders both here. No retry can fix it (kind no-webgl): the job's gl must change.
export const WEBGL_RE =
	/failed to create webgl context|Error creating WebGL context|Could not create a WebGL context|WebGL is not supported|WebGL context could not be created/i;

// The line that tells the WebGL story of the failure `err`, or null: from the error
// itself (message, stack: Three.js throws), or from the page's console lines of type error
// during the job (job.browserErrors: CanvasKit's thrown "failed to create webgl context"
// reaches us only as a logged error, while the render fails with an empty message). Never
// from other console lines: a page that logs "WebGL not supported" while probing and
// then falls back must not make an unrelated failure permanent (kind no-webgl, not
// retried); what failed the frame is an error, a probe's remark is a log or a warning.
export const webglLine = (err, job) =>
	[String(err?.message ?? err ?? ''), String(err?.stack ?? ''), ...(job?.browserErrors ?? [])]
		.flatMap((t) => t.split('\n'))
		.map((l) => l.trim())
		.find((l) => WEBGL_RE.test(l)) ?? null;

// onBrowserLog for Remotion: the page's last console lines, kept in holder.browserLog for
// classifying a failure (the URL a failed fetch asked for is only said there), each with
// the URL it came from; those of type error (console.error, Chromium's own error
// entries) also in holder.browserErrors (webglLine).
export const keepBrowserLog = (holder) => (log) => {
	const where = (log?.stackTrace ?? []).map((f) => f?.url).filter((u) => /^https?:/.test(u ?? ''));
	const line = String(log?.text ?? '') + (where.length > 0 ? ` (at ${where[0]})` : '');
	holder.browserLog = [...(holder.browserLog ?? []).slice(-49), line];
	if (log?.type === 'error') holder.browserErrors = [...(holder.browserErrors ?? []).slice(-49), line];
};

// A request of the page that failed without saying what it asked for (fetch's "Failed to
// fetch": a Google Fonts stylesheet on a host without network, say).
const FETCH_RE = /Failed to fetch|NetworkError when attempting to fetch|Load failed|net::ERR_/i;

// The URL of the failed request, from the error or the page's console (Chromium logs
// "GET <url> net::ERR_..." or "Failed to load resource: ... (at <url>)"), or null. URLs of
// the bundle itself (its scripts, on localhost) are skipped: they are where the request
// was made, not what it asked for. So is the bundle server's /favicon.ico: Chromium asks
// for it by itself, and once the page has failed it may fail too (net::ERR_... as the
// server closes), later in the log than the page's own request (seen once in CI).
export const failedUrl = (err, job) => {
	const lines = [String(err?.message ?? err ?? ''), ...(job?.browserLog ?? []).filter((l) => FETCH_RE.test(l))];
	for (const line of lines.reverse()) {
		const urls = line.match(/https?:\/\/[^\s)'"]+/g) ?? [];
		const found = urls.find(
			(u) => !/\.js(:\d+)*$/.test(u) && !/^https?:\/\/localhost:\d+\/?(favicon\.ico)?$/.test(u),
		);
		if (found) return found;
	}
	return null;
};

// `first` with the URL its failed fetch asked for, when it hides it.
export const withFetchedUrl = (first, err, job) => {
	if (!/Failed to fetch|NetworkError when attempting to fetch/i.test(first)) return first;
	const url = failedUrl(err, job);
	return url === null
		? `${first} (a request of the page failed; no URL in the log: see the run log)`
		: `${first} (${url}${/^https?:\/\/(localhost|127\.)/.test(url) ? '' : ': is the network or that host reachable from this host?'})`;
};

export const formatDetail = (err, mappedStack) => {
	const parts = [];
	const stack = err?.stack ? String(err.stack) : String(err?.message ?? err);
	if (err?.message && !stack.includes(String(err.message))) parts.push(String(err.message));
	parts.push(stack);
	if (mappedStack) parts.push('Source-mapped stack:\n' + mappedStack);
	if (err?.frame != null) parts.push(`Frame: ${err.frame}`);
	return parts.join('\n');
};

export const classify = (err, job) => {
	const msg = String(err?.message ?? err ?? '');
	const text = `${msg}\n${err?.stack ?? ''}`;
	const code = err?.code;
	if (job?.cancelled && !job.browserDiedDuringJob) return 'cancelled';
	if (code === 'ENOSPC' || /ENOSPC|No space left on device/i.test(text)) return 'no-space';
	if (code === 'ENOMEM' || memoryLine(text) !== null) return 'out-of-memory';
	// Could not (re)start the browser for this job, or it died during the job.
	if (job?.phase === 'browser' || job?.browserDiedDuringJob) return 'browser-crashed';
	if (/Could not find composition with ID/i.test(msg)) return 'composition-not-found';
	if (webglLine(err, job) !== null) return 'no-webgl';
	if (/Invalid props for /.test(msg)) return 'invalid-props';
	if (BROWSER_RE.test(msg)) return 'browser-crashed';
	if (/got cancelled/i.test(msg)) return 'cancelled';
	if (
		Array.isArray(err?.stackFrame) ||
		Array.isArray(err?.symbolicatedStackFrames) ||
		/An error occurred while rendering frame/i.test(msg) ||
		/https?:\/\/[^\s]+\/[^\s]*\.js:\d+/.test(String(err?.stack ?? ''))
	)
		return 'component-error';
	return 'error';
};

export const friendlyMessage = ({kind, err, job, request, location, browserExecutable}) => {
	const first = withFetchedUrl(stripErrorPrefix(firstLine(err?.message ?? err)) || 'Render failed', err, job);
	switch (kind) {
		case 'cancelled':
			return job.cancelReason === 'shutdown'
				? `Render of job ${job.jobId} was cancelled because the worker is shutting down`
				: `Render of job ${job.jobId} was cancelled`;
		case 'browser-crashed':
			if (job.phase === 'browser') return `Could not start the browser ${browserExecutable}: ${first}`;
			if (job.browserDiedDuringJob) {
				const why = /got cancelled/i.test(first) ? '' : ` (${first})`;
				return `The browser (${browserExecutable}) crashed or was killed during the render; it is restarted for the next job${why}`;
			}
			return `The browser failed during the render (${first}); it is restarted for the next job`;
		case 'component-error': {
			const where = err?.frame != null ? ` at frame ${err.frame}` : '';
			const at = location ? ` (${location})` : '';
			return `${request.composition} threw${where}: ${first}${at}`;
		}
		case 'no-webgl': {
			const gl = job?.gl ? `gl: ${job.gl}` : "Chromium's default GL backend";
			return `No WebGL context with ${gl} on this host (${stripErrorPrefix(webglLine(err, job))}): set \`settings: {gl: swangle}\` in the job file`;
		}
		case 'no-space':
			return `No space left on device while rendering ${request?.outputLocation ?? ''}: ${first}`;
		case 'out-of-memory': {
			const line = memoryLine(`${err?.message ?? ''}\n${err?.stack ?? ''}`) ?? first;
			return `Out of memory while rendering: ${stripErrorPrefix(line)}`;
		}
		default:
			return first;
	}
};

// The end of a one-shot worker script (check-props.mjs, compositions.mjs): run `main`,
// exit 0 when it resolves (Remotion's server can leave handles open), else emit the one
// fatal line, whose message is describeFailure(err, first) (`first`: the error's first
// line without its "Error:" prefix, '' when it has none), and exit 1.
export const runWorkerMain = (main, describeFailure) => {
	// A page that failed rejects its own close too (Target closed): logged, so that the
	// real error is the one reported.
	process.on('unhandledRejection', (err) => logErr('unhandled rejection:', err?.stack ?? err));
	main().then(
		() => process.exit(0),
		(err) => {
			const first = stripErrorPrefix(firstLine(err?.message ?? err));
			emit({type: 'fatal', kind: err?.kind ?? 'error', message: describeFailure(err, first), detail: formatDetail(err, null)});
			process.exit(1);
		},
	);
};
