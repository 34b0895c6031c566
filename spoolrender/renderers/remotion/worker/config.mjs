// spoolrender: the render defaults a project's remotion.config.ts sets.
//
// Remotion's Node APIs ignore remotion.config.ts (its docs say so); only its CLI reads it.
// So that a job renders as `npx remotion render` would, we load the config with the
// project's own @remotion/cli (its internal config loader, the one `remotion studio`
// uses for its render dialog), keep what the config changed from Remotion's defaults, and
// map those to renderMedia()/openBrowser() options. The result is stored in the bundle
// (RENDER_DEFAULTS_FILE), so it is cached with it under a key that covers the config file.

import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';

export const RENDER_DEFAULTS_FILE = '.spoolrender-render-defaults.json';

const CONFIG_FILES = ['remotion.config.ts', 'remotion.config.js'];

export const configFileOf = (projectDir) => {
	for (const name of CONFIG_FILES) {
		const p = path.join(projectDir, name);
		try {
			if (fs.statSync(p).isFile()) return p;
		} catch {
			// not there
		}
	}
	return null;
};

// getRenderDefaults() name -> renderMedia() option. Left out on purpose: concurrency
// (spoolrender's slot budget decides), stillImageFormat (stills), and what only concerns
// the CLI or Remotion's licensing (logLevel, beepOnFinish, outputLocation, repro, ...).
const MEDIA_OPTIONS = {
	codec: 'codec',
	crf: 'crf',
	scale: 'scale',
	jpegQuality: 'jpegQuality',
	videoImageFormat: 'imageFormat',
	muted: 'muted',
	enforceAudioTrack: 'enforceAudioTrack',
	proResProfile: 'proResProfile',
	x264Preset: 'x264Preset',
	pixelFormat: 'pixelFormat',
	audioBitrate: 'audioBitrate',
	videoBitrate: 'videoBitrate',
	encodingBufferSize: 'encodingBufferSize',
	encodingMaxRate: 'encodingMaxRate',
	everyNthFrame: 'everyNthFrame',
	delayRenderTimeout: 'timeoutInMilliseconds',
	audioCodec: 'audioCodec',
	offthreadVideoCacheSizeInBytes: 'offthreadVideoCacheSizeInBytes',
	offthreadVideoThreads: 'offthreadVideoThreads',
	colorSpace: 'colorSpace',
	numberOfGifLoops: 'numberOfGifLoops',
	forSeamlessAacConcatenation: 'forSeamlessAacConcatenation',
	metadata: 'metadata',
	hardwareAcceleration: 'hardwareAcceleration',
	mediaCacheSizeInBytes: 'mediaCacheSizeInBytes',
	sampleRate: 'sampleRate',
};
// getRenderDefaults() name -> openBrowser() chromiumOptions key.
const CHROMIUM_OPTIONS = {
	openGlRenderer: 'gl',
	disableWebSecurity: 'disableWebSecurity',
	ignoreCertificateErrors: 'ignoreCertificateErrors',
	userAgent: 'userAgent',
	darkMode: 'darkMode',
	multiProcessOnLinux: 'enableMultiProcessOnLinux',
};

// -> {renderMedia: {...}, chromiumOptions: {...}, configFile} for the project's config
// file, or null when it has none. Throws when the config cannot be loaded.
export const readRenderDefaults = async (project) => {
	const configFile = configFileOf(project.dir);
	if (configFile === null) return null;
	const cli = createRequire(path.join(project.packageDir('@remotion/cli'), 'package.json'));
	// The CLI parses process.argv when its modules load: give it a bare `remotion`.
	const argv = process.argv;
	process.argv = [argv[0], 'remotion'];
	try {
		const {getRenderDefaults} = cli('./dist/get-render-defaults.js');
		const {loadConfig} = cli('./dist/get-config-file-name.js');
		const before = getRenderDefaults('error');
		await loadConfig(project.dir);
		const after = getRenderDefaults('error');
		const changed = (key) => JSON.stringify(before[key]) !== JSON.stringify(after[key]) && after[key] != null;
		const pick = (table) =>
			Object.fromEntries(Object.entries(table).filter(([key]) => changed(key)).map(([key, opt]) => [opt, after[key]]));
		return {renderMedia: pick(MEDIA_OPTIONS), chromiumOptions: pick(CHROMIUM_OPTIONS), configFile};
	} finally {
		process.argv = argv;
	}
};
