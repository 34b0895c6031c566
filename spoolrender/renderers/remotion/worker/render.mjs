// spoolrender: one render request, from selectComposition to a finished file.

import fs from 'node:fs';
import path from 'node:path';
import {chunkOptions, validateChunk} from './chunks.mjs';
import {InvalidSettings, classify, formatDetail, friendlyMessage, keepBrowserLog} from './errors.mjs';
import {emit, logErr} from './protocol.mjs';
import {InvalidProps, inspectingBrowser} from './schemas.mjs';

// After the browser dies mid-render, Remotion 4.0.529 launches a replacement browser of
// its own and then hangs; we cancel the render after this grace.
export const BROWSER_LOSS_GRACE_MS = 3000;

// The renderMedia options of the project's remotion.config.ts that apply to stills too.
const STILL_DEFAULTS = ['scale', 'jpegQuality', 'timeoutInMilliseconds'];

// What a "span" request needs: the job, its composition, props and options.
export const validateSpanRequest = (req) => {
	const problems = [];
	if (typeof req.jobId !== 'string' || req.jobId === '') problems.push('jobId must be a non-empty string');
	if (typeof req.composition !== 'string' || req.composition === '')
		problems.push('composition must be a non-empty string');
	if (req.inputProps != null && (typeof req.inputProps !== 'object' || Array.isArray(req.inputProps)))
		problems.push('inputProps must be an object');
	if (req.options != null && (typeof req.options !== 'object' || Array.isArray(req.options)))
		problems.push('options must be an object');
	return problems;
};

export const validateRequest = (req) => {
	const problems = validateSpanRequest(req);
	if (typeof req.outputLocation !== 'string' || !path.isAbsolute(req.outputLocation))
		problems.push('outputLocation must be an absolute path');
	if (req.still != null && !(Number.isInteger(req.still.frame) && typeof req.still.imageFormat === 'string'))
		problems.push('still must be {frame: N, imageFormat: S}');
	if (req.still != null && req.chunk != null) problems.push('a still has no chunks');
	problems.push(...validateChunk(req.chunk));
	return problems;
};

// Remotion writes `<out>.<uuid>.remotion-in-progress` beside the output and links it into
// place at the end: after a failure, both the leftovers and any partial output go.
export const cleanupOutput = (outputLocation) => {
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

// The renderMedia/renderStill options of one request: the project's remotion.config.ts
// defaults (ctx.renderDefaults), then the job's own settings (req.options, already under
// Remotion's names and checked by spoolrender) on top. The browser's options are not
// among them: its GL backend is the browser's launch option (host.ensure).
const mediaOptions = (ctx, req) => {
	const {chromiumOptions, ...own} = req.options ?? {};
	const base = req.still
		? Object.fromEntries(STILL_DEFAULTS.filter((k) => k in ctx.renderDefaults).map((k) => [k, ctx.renderDefaults[k]]))
		: ctx.renderDefaults;
	const options = {...base, ...own};
	if (req.concurrency != null && !req.still) options.concurrency = req.concurrency;
	if (options.codec === undefined && !req.still) options.codec = 'h264';
	return {options, gl: chromiumOptions?.gl ?? null};
};

// Why the job's frames do not exist in the composition, or null: known only once the
// composition is selected (props can change its duration). No retry can fix it.
const frameProblem = (req, options, duration) => {
	const last = duration - 1;
	if (req.still && req.still.frame > last)
		return `still frame ${req.still.frame} is past the composition's last frame ${last}`;
	const range = options.frameRange;
	const end = Array.isArray(range) ? range[1] : range;
	const what = req.chunk ? 'the chunk' : 'frame_range';
	if (typeof end === 'number' && end > last) return `${what} ends at ${end}, past the composition's last frame ${last}`;
	return null;
};

// The composition of `req` with its props (calculateMetadata included), on the browser.
const selectFor = async (ctx, req, job, options, gl) => {
	const {renderer, serveUrl, host, args} = ctx;
	job.gl = gl ?? ctx.host.chromiumOptions?.gl ?? null;
	job.phase = 'browser';
	await host.ensure(true, gl);
	if (job.cancelled) throw new Error('Render was cancelled before it started');
	job.phase = 'select';
	// The props are checked with the composition's own schema in the page selectComposition
	// opens (schemas.mjs): before the first frame, and winning over whatever
	// calculateMetadata made of props that break it.
	const {wrapped, result} = inspectingBrowser(host.browser, {id: req.composition, props: req.inputProps ?? {}});
	const selecting = renderer.selectComposition({
		serveUrl,
		id: req.composition,
		inputProps: req.inputProps ?? {},
		puppeteerInstance: wrapped,
		browserExecutable: args.browserExecutable,
		logLevel: args.logLevel,
		onBrowserLog: keepBrowserLog(job),
		...(options.timeoutInMilliseconds ? {timeoutInMilliseconds: options.timeoutInMilliseconds} : {}),
	});
	const [selected, inspected] = await Promise.allSettled([selecting, selecting.catch(() => null).then(result)]);
	const checked = inspected.value?.checked;
	if (job.cancelled) throw new Error('Render was cancelled before it started');
	if (checked?.issues?.length > 0) throw new InvalidProps(req.composition, checked.issues);
	if (selected.status === 'rejected') throw selected.reason;
	// A schema that throws (a refinement's own bug) vouches for nothing: the CLI renders such
	// props, so the render goes on, said in the run log, as submit queues such a job.
	if (checked?.error) logErr(`props not checked with ${req.composition}'s schema: ${checked.error}`);
	return selected.value;
};

// A "span" request: the frames the whole job renders (its frame_range, else every frame
// of the composition with its props) and its fps, for planning chunks.
export const runSpan = async (ctx, req, job) => {
	const whole = {...req, still: null, chunk: null};
	const {options, gl} = mediaOptions(ctx, whole);
	try {
		const composition = await selectFor(ctx, whole, job, options, gl);
		const why = frameProblem(whole, options, composition.durationInFrames);
		if (why !== null) throw new InvalidSettings(why);
		const range = options.frameRange ?? [0, composition.durationInFrames - 1];
		const [first, last] = Array.isArray(range) ? range : [range, range];
		job.settled = true;
		emit({
			type: 'done',
			jobId: req.jobId,
			first,
			last,
			fps: composition.fps,
			durationInFrames: composition.durationInFrames,
			width: composition.width,
			height: composition.height,
		});
	} catch (err) {
		await reportFailure(ctx, req, job, err);
	}
};

// ctx: {renderer, serveUrl, host (BrowserHost), args, stats, renderDefaults, symbolicate}
export const runRender = async (ctx, req, job) => {
	const t0 = Date.now();
	const inputProps = req.inputProps ?? {};
	const {options: jobOptions, gl} = mediaOptions(ctx, req);
	const {renderer, serveUrl, host, args, stats} = ctx;
	try {
		const composition = await selectFor(ctx, req, job, jobOptions, gl);
		emit({
			type: 'started',
			jobId: req.jobId,
			durationInFrames: composition.durationInFrames,
			fps: composition.fps,
			width: composition.width,
			height: composition.height,
		});

		const options = req.chunk ? chunkOptions(jobOptions, req) : jobOptions;
		const why = frameProblem(req, options, composition.durationInFrames);
		if (why !== null) throw new InvalidSettings(why);

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
			stage: p.stitchStage === 'muxing' ? 'muxing' : p.renderedFrames < totalFrames ? 'rendering' : 'encoding',
		});

		job.phase = 'render';
		const {cancelSignal, cancel} = renderer.makeCancelSignal();
		job.cancel = cancel;
		if (job.cancelled) cancel();
		if (req.still) {
			totalFrames = 1;
			await renderer.renderStill({
				...options,
				composition,
				serveUrl,
				inputProps,
				output: req.outputLocation,
				frame: req.still.frame,
				imageFormat: req.still.imageFormat,
				puppeteerInstance: host.browser,
				browserExecutable: args.browserExecutable,
				cancelSignal,
				overwrite: true,
				logLevel: args.logLevel,
				onBrowserLog: keepBrowserLog(job),
			});
		} else {
			await renderer.renderMedia({
				...options,
				composition,
				serveUrl,
				inputProps,
				outputLocation: req.outputLocation,
				puppeteerInstance: host.browser,
				browserExecutable: args.browserExecutable,
				cancelSignal,
				overwrite: true,
				logLevel: args.logLevel,
				onBrowserLog: keepBrowserLog(job),
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
			});
		}
		if (latest && latest !== lastSent) emit(progressEvent(latest));
		job.settled = true;
		stats.jobsRendered++;
		emit({
			type: 'done',
			jobId: req.jobId,
			outputLocation: req.outputLocation,
			durationInFrames: composition.durationInFrames,
			frameCount: totalFrames, // frames in the output (frame range, every-nth-frame)
			fps: composition.fps,
			width: composition.width,
			height: composition.height,
			codec: req.still ? null : req.chunk ? jobOptions.codec ?? 'h264' : options.codec,
			still: req.still ? req.still.imageFormat : null,
			audioLocation: req.chunk ? options.separateAudioTo : null, // a chunk's audio part, if it has one
			renderMs: Date.now() - t0,
			stats: ctx.statsSnapshot(),
		});
	} catch (err) {
		await reportFailure(ctx, req, job, err);
	}
};

// Classify a failed request, clean up after it and emit its "failed" event.
export const reportFailure = async (ctx, req, job, err) => {
	const {host, args, stats} = ctx;
	const kind =
		err instanceof InvalidSettings
			? 'invalid-settings'
			: err instanceof InvalidProps
				? 'invalid-props'
				: err?.kind === 'setup'
					? 'setup'
					: classify(err, job);
	if (kind === 'browser-crashed' || kind === 'out-of-memory') {
		host.dead = true;
		host.reapStrays('after the browser crashed', Boolean(ctx.running()));
		for (const ms of [5000, 15000]) {
			setTimeout(() => host.reapStrays('after the browser crashed', Boolean(ctx.running())), ms).unref();
		}
	}
	cleanupOutput(req.outputLocation);
	if (req.chunk?.audioLocation) cleanupOutput(req.chunk.audioLocation);
	let sym = {location: null, mappedStack: null};
	if (kind === 'component-error' || kind === 'invalid-props' || kind === 'error') {
		try {
			sym = await ctx.symbolicate(err);
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
		message: friendlyMessage({kind, err, job, request: req, location, browserExecutable: args.browserExecutable}),
		location,
		detail:
			(job.browserDiedDuringJob
				? `The browser's DevTools connection closed during the render; the render was cancelled ${BROWSER_LOSS_GRACE_MS} ms later if it had not failed by itself.\n`
				: '') + formatDetail(err, sym.mappedStack),
		stats: ctx.statsSnapshot(),
	});
};
