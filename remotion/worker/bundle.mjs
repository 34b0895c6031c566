// spoolrender: build the Remotion bundle once, so render workers can reuse it.
//
// Usage: node worker/bundle.mjs --out DIR [--entry src/index.ts] [--no-webpack-cache]
//
// Bundles src/index.ts (relative to this package) with @remotion/bundler into
// DIR (created if missing; an existing DIR is overwritten by the bundler).
// Caching and locking of bundle dirs is the caller's (Python side) job.
// By default webpack's persistent cache (node_modules/.cache/webpack, ~160 MB)
// makes rebuilds ~5x faster; --no-webpack-cache turns it off. Do not run two
// bundle.mjs processes at once on the same package (shared webpack cache).
//
// stdout carries exactly one JSON line:
//   success: {"type":"bundled","out":"<abs DIR>","ms":<int>}          exit 0
//   failure: {"type":"fatal","message":"<first line>","detail":"<full text>"}  exit 1
// Everything else (bundler logs, console output) goes to stderr.

import fs from 'node:fs';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const emit = (obj) => {
	process.stdout.write(JSON.stringify(obj) + '\n');
};

// Keep stdout for the single protocol line.
for (const name of ['log', 'info', 'debug', 'warn']) {
	console[name] = (...args) => console.error(...args);
}

const here = path.dirname(fileURLToPath(import.meta.url));
const pkgRoot = path.resolve(here, '..');

const parseArgs = (argv) => {
	const out = {out: null, entry: path.join(pkgRoot, 'src', 'index.ts'), cache: true};
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const takeValue = () => {
			const eq = a.indexOf('=');
			if (eq !== -1) return a.slice(eq + 1);
			const v = argv[++i];
			if (v === undefined) throw new Error(`Missing value for ${a}`);
			return v;
		};
		if (a === '--out' || a.startsWith('--out=')) out.out = takeValue();
		else if (a === '--entry' || a.startsWith('--entry=')) out.entry = takeValue();
		else if (a === '--no-webpack-cache') out.cache = false;
		else throw new Error(`Unknown argument: ${a}`);
	}
	if (!out.out) throw new Error('Usage: node worker/bundle.mjs --out DIR');
	return out;
};

// A one-line, actionable summary: webpack errors start with lines such as
// "Module build failed (from ...):", so keep joining lines that end in ':'
// and prefer the line that names file:line:col.
const summarize = (err) => {
	const lines = String(err?.message ?? err ?? '')
		.split('\n')
		.map((l) => l.trim())
		.filter(Boolean);
	const located = lines.find((l) => /\S+:\d+:\d+: (ERROR|error)/.test(l));
	const picked = [];
	for (const l of lines) {
		picked.push(l.replace(/^Error: /, '').replace(/ \(from [^)]*\)/, ''));
		if (!l.endsWith(':') || picked.length >= 3) break;
	}
	let msg = picked.join(' ');
	if (located && !msg.includes(located)) msg = `${msg} ${located}`;
	return msg || 'Bundling failed';
};

const fail = (err) => {
	const detail = err && err.stack ? String(err.stack) : String(err);
	emit({type: 'fatal', message: summarize(err), detail});
	process.exitCode = 1;
};

const main = async () => {
	const args = parseArgs(process.argv.slice(2));
	const outDir = path.resolve(args.out);
	const entryPoint = path.resolve(args.entry);
	if (!fs.existsSync(entryPoint)) {
		throw new Error(`Entry point not found: ${entryPoint}`);
	}
	fs.mkdirSync(path.dirname(outDir), {recursive: true});
	const {bundle} = await import('@remotion/bundler');
	const t0 = Date.now();
	const result = await bundle({
		entryPoint,
		outDir,
		rootDir: pkgRoot,
		enableCaching: args.cache,
		onProgress: () => undefined,
	});
	emit({type: 'bundled', out: result || outDir, ms: Date.now() - t0});
};

main().then(
	() => {
		// The bundler can leave handles open; exit explicitly.
		process.exit(process.exitCode ?? 0);
	},
	(err) => {
		fail(err);
		process.exit(1);
	},
);
