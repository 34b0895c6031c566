// spoolrender: join a split job's chunks into one file with Remotion's own combineChunks()
// (public in @remotion/renderer since 4.0.279; Remotion Lambda joins its chunks with it).
//
// Request: {"type":"join","jobId":S,"outputLocation":ABS_PATH,"fps":N,"framesPerChunk":N,
//           "first":N,"last":N,"parts":[{"video":ABS_PATH,"audio":ABS_PATH|null}, ...]}
//   parts: in order, each chunk's h264-ts video and (unless muted) its AAC audio, rendered
//   as chunks.mjs describes; every chunk but the last has exactly framesPerChunk frames,
//   chunk i starting at first + i * framesPerChunk (combineChunks() cuts the audio of part
//   i at i * framesPerChunk / fps: uneven chunks would be joined out of step).
// Events: progress {"progress":0..1,"stage":"joining"}, then done {"frameCount","fps",
//   "joinMs"} or failed (as for renders; a missing combineChunks() is kind "setup").

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {MIN_FRAMES_PER_CHUNK} from './chunks.mjs';
import {SetupError} from './project.mjs';
import {emit} from './protocol.mjs';
import {reportFailure} from './render.mjs';

const isWhole = (n) => Number.isInteger(n) && n >= 0;
const isAbsolute = (p) => typeof p === 'string' && path.isAbsolute(p);

export const validateJoin = (req) => {
	const problems = [];
	if (typeof req.jobId !== 'string' || req.jobId === '') problems.push('jobId must be a non-empty string');
	if (!isAbsolute(req.outputLocation)) problems.push('outputLocation must be an absolute path');
	if (!(typeof req.fps === 'number' && req.fps > 0)) problems.push('fps must be a positive number');
	if (!(isWhole(req.first) && isWhole(req.last) && req.first <= req.last)) problems.push('first <= last must be frames');
	if (!(Number.isInteger(req.framesPerChunk) && req.framesPerChunk >= MIN_FRAMES_PER_CHUNK))
		problems.push(`framesPerChunk must be a whole number >= ${MIN_FRAMES_PER_CHUNK}`);
	const parts = Array.isArray(req.parts) ? req.parts : [];
	if (parts.length === 0) problems.push('parts must list the chunks');
	if (!parts.every((p) => p && isAbsolute(p.video) && (p.audio === null || isAbsolute(p.audio))))
		problems.push('each part must be {video: ABS_PATH, audio: ABS_PATH|null}');
	const withAudio = parts.filter((p) => p?.audio).length;
	if (withAudio !== 0 && withAudio !== parts.length) problems.push('either every part has audio or none has');
	return problems;
};

// combineChunks() writes the parts' paths into ffmpeg's concat protocol (`concat:a|b`)
// and a concat demuxer list (`file 'a'`): a '|' or a quote in a path would break them.
// So the parts are joined through symlinks with plain names in a private directory.
const linkParts = (parts) => {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spoolrender-join-'));
	const videoFiles = [];
	const audioFiles = [];
	parts.forEach((part, i) => {
		const name = String(i).padStart(6, '0');
		const video = path.join(dir, `${name}.ts`);
		fs.symlinkSync(part.video, video);
		videoFiles.push(video);
		if (part.audio) {
			const audio = path.join(dir, `${name}.aac`);
			fs.symlinkSync(part.audio, audio);
			audioFiles.push(audio);
		}
	});
	return {dir, videoFiles, audioFiles};
};

export const runJoin = async (ctx, req, job) => {
	const t0 = Date.now();
	const {renderer, args} = ctx;
	let links = null;
	try {
		if (typeof renderer.combineChunks !== 'function') {
			throw new SetupError(
				`this project's @remotion/renderer has no combineChunks() (Remotion 4.0.279 or later has it): upgrade Remotion to join chunks`,
			);
		}
		for (const part of req.parts) {
			for (const file of [part.video, part.audio].filter(Boolean)) {
				if (!fs.statSync(file).isFile()) throw new Error(`chunk part ${file} is not a file`);
			}
		}
		links = linkParts(req.parts);
		job.phase = 'join';
		const {cancelSignal, cancel} = renderer.makeCancelSignal();
		job.cancel = cancel;
		if (job.cancelled) cancel();
		let lastEmit = 0;
		await renderer.combineChunks({
			outputLocation: req.outputLocation,
			videoFiles: links.videoFiles,
			audioFiles: links.audioFiles,
			codec: 'h264',
			audioCodec: links.audioFiles.length > 0 ? 'aac' : null,
			fps: req.fps,
			framesPerChunk: req.framesPerChunk,
			preferLossless: false,
			compositionDurationInFrames: req.last + 1,
			frameRange: [req.first, req.last],
			everyNthFrame: 1,
			metadata: ctx.renderDefaults.metadata ?? null,
			logLevel: args.logLevel,
			cancelSignal,
			onProgress: ({totalProgress}) => {
				const now = Date.now();
				if (now - lastEmit >= 250) {
					lastEmit = now;
					emit({type: 'progress', jobId: req.jobId, progress: Math.max(0, Math.min(1, totalProgress)), stage: 'joining'});
				}
			},
		});
		job.settled = true;
		emit({type: 'progress', jobId: req.jobId, progress: 1, stage: 'joining'});
		emit({
			type: 'done',
			jobId: req.jobId,
			outputLocation: req.outputLocation,
			frameCount: req.last - req.first + 1,
			fps: req.fps,
			joinMs: Date.now() - t0,
		});
	} catch (err) {
		await reportFailure(ctx, req, job, err);
	} finally {
		if (links) fs.rmSync(links.dir, {recursive: true, force: true});
	}
};
