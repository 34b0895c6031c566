// spoolrender: split jobs, the worker's side: the renderMedia() options of one chunk of a
// job ("render" requests with a `chunk`). The frames a whole job renders ("span" requests)
// are render.mjs's runSpan; joining the chunks is join.mjs.
//
// A chunk is rendered the way Remotion Lambda renders one for combineChunks()
// (@remotion/serverless, handlers/renderer.ts, with @remotion/renderer 4.0.529):
//   - codec h264-ts: h264 in an MPEG-TS stream. combineChunks() joins h264 parts with
//     ffmpeg's concat protocol (combine-video-streams-seamlessly.js) and copies the video
//     into the final container: no re-encoding, no seam. Only h264 is joined that way
//     (can-concat-seamlessly.js: canConcatVideoSeamlessly).
//   - frameRange: the chunk's frames; compositionStart: the whole job's first frame.
//   - audio into a separate AAC file (separateAudioTo) rendered with
//     forSeamlessAacConcatenation: the chunk's audio then starts and ends on AAC packet
//     borders (1024 samples) relative to compositionStart, with two packets of extra audio
//     either side (get-extra-frames-to-capture.js), which combineChunks() cuts off with
//     the concat demuxer's inpoint/outpoint and copies: no re-encoding, no gap, no click.
//     Seamless only for AAC and only when a chunk is longer than 4 frames
//     (canConcatAudioSeamlessly).
//   - enforceAudioTrack: every chunk has its audio part even where it is silent, so that a
//     silent chunk leaves no hole in the joined track (a split job's video therefore always
//     has an audio track, as a Lambda render has). A muted job has no audio parts.

import path from 'node:path';
import {InvalidSettings} from './errors.mjs';

// can-concat-seamlessly.js: "Rendering a chunk that is too small ... is currently buggy".
export const MIN_FRAMES_PER_CHUNK = 5;

const isWhole = (n) => Number.isInteger(n) && n >= 0;

export const validateChunk = (chunk) => {
	if (chunk == null) return [];
	const ok =
		typeof chunk === 'object' &&
		isWhole(chunk.first) &&
		isWhole(chunk.last) &&
		chunk.first <= chunk.last &&
		isWhole(chunk.compositionStart) &&
		chunk.compositionStart <= chunk.first &&
		Number.isInteger(chunk.framesPerChunk) &&
		(chunk.audioLocation === null || (typeof chunk.audioLocation === 'string' && path.isAbsolute(chunk.audioLocation)));
	return ok
		? []
		: ['chunk must be {first, last, compositionStart <= first, framesPerChunk, audioLocation: ABS_PATH|null} (whole numbers)'];
};

// Why a job with these (effective) renderMedia options cannot be rendered in chunks and
// joined seamlessly, or null. spoolrender checks the job file's settings and the
// project's remotion.config.ts before it splits a job; this is the same rule applied to
// what the render would really use.
export const splitProblem = (options) => {
	const codec = options.codec ?? 'h264';
	if (codec !== 'h264') {
		return `codec ${codec} cannot be rendered in chunks: Remotion joins chunks seamlessly only for h264`;
	}
	if ((options.everyNthFrame ?? 1) !== 1) {
		return `every_nth_frame ${options.everyNthFrame} cannot be rendered in chunks`;
	}
	if (!options.muted && options.audioCodec != null && options.audioCodec !== 'aac') {
		return `audio codec ${options.audioCodec} cannot be rendered in chunks: Remotion joins audio seamlessly only for aac`;
	}
	return null;
};

// The renderMedia() options of the chunk `req.chunk`, from the job's own `options`.
export const chunkOptions = (options, req) => {
	const chunk = req.chunk;
	const problem = splitProblem(options);
	if (problem !== null) throw new InvalidSettings(problem);
	if (chunk.framesPerChunk < MIN_FRAMES_PER_CHUNK) {
		throw new InvalidSettings(
			`chunks of ${chunk.framesPerChunk} frames cannot be joined seamlessly (Remotion needs at least ${MIN_FRAMES_PER_CHUNK})`,
		);
	}
	const audio = !options.muted;
	if (audio && chunk.audioLocation === null) throw new InvalidSettings('the chunk has audio but no audioLocation');
	return {
		...options,
		codec: 'h264-ts',
		frameRange: [chunk.first, chunk.last],
		compositionStart: chunk.compositionStart,
		enforceAudioTrack: audio,
		forSeamlessAacConcatenation: audio,
		separateAudioTo: audio ? chunk.audioLocation : null,
		audioCodec: audio ? 'aac' : null,
	};
};
