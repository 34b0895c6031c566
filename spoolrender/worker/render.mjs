// spoolrender: one render request, from selectComposition to a finished file.

import fs from 'node:fs';
import path from 'node:path';
import {classify, formatDetail, friendlyMessage} from './errors.mjs';
import {emit, logErr} from './protocol.mjs';

// After the browser dies mid-render, Remotion 4.0.529 launches a replacement browser of
// its own and then hangs; we cancel the render after this grace.
export const BROWSER_LOSS_GRACE_MS = 3000;

// Request fields passed to renderMedia as they are when not null.
const PASSED_THROUGH = ['codec', 'concurrency', 'scale', 'crf', 'everyNthFrame', 'frameRange'];

export const validateRequest = (req) => {
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

// The renderMedia options of one request: the project's remotion.config.ts defaults
// (ctx.renderDefaults), then the request's own settings on top.
const mediaOptions = (ctx, req) => {
	const options = {...ctx.renderDefaults};
	for (const key of PASSED_THROUGH) {
		if (req[key] !== null && req[key] !== undefined) options[key] = req[key];
	}
	if (options.codec === undefined) options.codec = 'h264';
	return options;
};

// ctx: {renderer, serveUrl, host (BrowserHost), args, stats, renderDefaults, symbolicate}
export const runRender = async (ctx, req, job) => {
	const t0 = Date.now();
	const inputProps = req.inputProps ?? {};
	const options = mediaOptions(ctx, req);
	const {renderer, serveUrl, host, args, stats} = ctx;
	try {
		job.phase = 'browser';
		await host.ensure(true);
		if (job.cancelled) throw new Error('Render was cancelled before it started');
		job.phase = 'select';
		const composition = await renderer.selectComposition({
			serveUrl,
			id: req.composition,
			inputProps,
			puppeteerInstance: host.browser,
			browserExecutable: args.browserExecutable,
			logLevel: args.logLevel,
			...(options.timeoutInMilliseconds ? {timeoutInMilliseconds: options.timeoutInMilliseconds} : {}),
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
			stage: p.stitchStage === 'muxing' ? 'muxing' : p.renderedFrames < totalFrames ? 'rendering' : 'encoding',
		});

		job.phase = 'render';
		const {cancelSignal, cancel} = renderer.makeCancelSignal();
		job.cancel = cancel;
		if (job.cancelled) cancel();
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
			codec: options.codec,
			renderMs: Date.now() - t0,
			stats: ctx.statsSnapshot(),
		});
	} catch (err) {
		const kind = classify(err, job);
		if (kind === 'browser-crashed' || kind === 'out-of-memory') {
			host.dead = true;
			host.reapStrays('after the browser crashed', Boolean(ctx.running()));
			for (const ms of [5000, 15000]) {
				setTimeout(() => host.reapStrays('after the browser crashed', Boolean(ctx.running())), ms).unref();
			}
		}
		cleanupOutput(req.outputLocation);
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
	}
};
