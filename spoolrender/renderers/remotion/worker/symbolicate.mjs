// spoolrender: map a failed frame's stack back to the project's source files.
//
// Remotion 4 hands back a SymbolicateableError whose `stackFrame` array points into
// http://localhost:PORT/bundle.js (0-based line/column from the DevTools protocol); its
// own symbolication needs the (by then closed) server. We map those frames with the
// bundle's .js.map files instead, with the project's own `source-map` package (a
// dependency of @remotion/renderer); without it, errors carry no source location.

import fs from 'node:fs';
import path from 'node:path';
import {logErr} from './protocol.mjs';

export const makeSymbolicator = ({serveUrl, projectDir, sourceMap}) => {
	const cache = new Map(); // abs .js path -> Promise<SourceMapConsumer|null>

	const loadSourceMap = (jsPath) => {
		if (!cache.has(jsPath)) {
			cache.set(
				jsPath,
				(async () => {
					const mapPath = jsPath + '.map';
					if (!sourceMap || !fs.existsSync(mapPath)) return null;
					const raw = JSON.parse(fs.readFileSync(mapPath, 'utf8'));
					return await new sourceMap.SourceMapConsumer(raw);
				})().catch((e) => {
					logErr('could not load the source map for', jsPath, e?.message ?? e);
					return null;
				}),
			);
		}
		return cache.get(jsPath);
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
		for (const m of String(err?.stack ?? '').matchAll(/at (?:(.+?) \()?(https?:\/\/[^\s)]+?):(\d+):(\d+)\)?/g)) {
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
			const rel = path.relative(projectDir, f);
			if (!rel.startsWith('..')) f = rel;
		}
		return f;
	};

	// -> {location: "src/X.tsx:L:C" | null, mappedStack: string | null}
	return async (err) => {
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
};
