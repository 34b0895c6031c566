// spoolrender: build a Remotion project's bundle once, so render workers can reuse it.
//
// Usage: node <package>/worker/bundle.mjs --project DIR --out DIR [--no-webpack-cache]
//
// Bundles as the project's own `remotion bundle` would, so that remotion.config.ts counts
// (entry point, webpack override with its loaders and aliases, public dir):
//  - with @remotion/cli installed: runs the project's own CLI, `remotion bundle --out-dir`,
//    in the project directory, then reads the config's render defaults (config.mjs) into
//    DIR/RENDER_DEFAULTS_FILE;
//  - without it: @remotion/bundler's bundle() from the entry point the CLI would pick,
//    which is only right when there is no remotion.config.ts (else a setup error naming
//    the install command).
// Caching and locking of bundle dirs is the caller's (Python side) job. By default
// webpack's persistent cache (node_modules/.cache/webpack) makes rebuilds ~5x faster;
// --no-webpack-cache turns it off. Do not run two bundles of one project at once.
//
// stdout carries exactly one JSON line:
//   success: {"type":"bundled","out":DIR,"ms":N,"via":"cli"|"api","remotionVersion":V,"versionWarning":S|null,
//             "configFile":PATH|null,"renderDefaults":{...}|null}                 exit 0
//   failure: {"type":"fatal","kind":"setup"|"error","message":FIRST_LINE,"detail":S} exit 1
// Everything else (bundler logs, the CLI's output) goes to stderr.

import {spawn} from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import {configFileOf, readRenderDefaults, RENDER_DEFAULTS_FILE} from './config.mjs';
import {installCommand, openProject, SetupError} from './project.mjs';
import {emit, parseArgs} from './protocol.mjs';

// Where `remotion bundle` looks for an entry point when none is configured.
const ENTRY_POINTS = ['src/index.ts', 'src/index.tsx', 'src/index.js', 'src/index.mjs', 'remotion/index.tsx',
	'remotion/index.ts', 'remotion/index.js', 'remotion/index.mjs', 'src/remotion/index.tsx', 'src/remotion/index.ts',
	'src/remotion/index.js', 'src/remotion/index.mjs'];

// A one-line, actionable summary: webpack errors start with lines such as
// "Module build failed (from ...):", so keep joining lines that end in ':' and prefer
// the line that names file:line:col.
const summarize = (text) => {
	const lines = String(text ?? '')
		.split('\n')
		// eslint-disable-next-line no-control-regex
		.map((l) => l.replace(/\u001b\[[0-9;]*m/g, '').trim())
		.filter(Boolean);
	const located = lines.find((l) => /\S+:\d+:\d+: (ERROR|error)/.test(l));
	const start = Math.max(0, lines.findIndex((l) => /error|failed|cannot|could not|not found/i.test(l)));
	const picked = [];
	for (const l of lines.slice(start)) {
		picked.push(l.replace(/^Error: /, '').replace(/ \(from [^)]*\)/, ''));
		if (!l.endsWith(':') || picked.length >= 3) break;
	}
	let msg = picked.join(' ');
	if (located && !msg.includes(located)) msg = `${msg} ${located}`;
	return msg || 'Bundling failed';
};

// The project's own `remotion bundle`, its output copied to our stderr (and kept for
// the error summary).
const bundleWithCli = (project, outDir, cache) =>
	new Promise((resolve, reject) => {
		const cliDir = project.packageDir('@remotion/cli');
		const bin = JSON.parse(fs.readFileSync(path.join(cliDir, 'package.json'), 'utf8')).bin?.remotion ?? 'remotion-cli.js';
		const argv = [path.join(cliDir, bin), 'bundle', '--out-dir', outDir, '--log', 'info'];
		if (!cache) argv.push('--bundle-cache=false');
		// stdin closed: the CLI must never wait for an answer.
		const child = spawn(process.execPath, argv, {cwd: project.dir, stdio: ['ignore', 'pipe', 'pipe']});
		let output = '';
		for (const stream of [child.stdout, child.stderr]) {
			stream.on('data', (chunk) => {
				output = (output + chunk).slice(-20000);
				process.stderr.write(chunk);
			});
		}
		child.on('error', reject);
		child.on('close', (code, signal) => {
			if (code === 0 && fs.existsSync(path.join(outDir, 'index.html'))) resolve();
			else {
				const err = new Error(`remotion bundle failed (${signal ? `signal ${signal}` : `exit ${code}`}): ${summarize(output)}`);
				err.detail = output;
				reject(err);
			}
		});
	});

const bundleWithApi = async (project, outDir, cache) => {
	const configFile = configFileOf(project.dir);
	if (configFile !== null) {
		throw new SetupError(
			`${project.dir} has a ${path.basename(configFile)}, which only Remotion's CLI reads: run \`${installCommand(project.manager, ['@remotion/cli'], project.remotionVersion)}\` there so that spoolrender bundles and renders with it`,
		);
	}
	const entry = ENTRY_POINTS.map((p) => path.join(project.dir, p)).find((p) => fs.existsSync(p));
	if (!entry) {
		throw new SetupError(`No Remotion entry point in ${project.dir} (looked for ${ENTRY_POINTS.join(', ')})`);
	}
	const [bundler] = project.load('@remotion/bundler');
	await bundler.bundle({entryPoint: entry, outDir, rootDir: project.dir, enableCaching: cache, onProgress: () => undefined});
};

const main = async () => {
	const args = parseArgs(process.argv.slice(2), {'--project': 'project', '--out': 'out', '--no-webpack-cache': 'cache'},
		{project: null, out: null, cache: true});
	if (!args.project || !args.out) throw new Error('Usage: node bundle.mjs --project DIR --out DIR');
	const outDir = path.resolve(args.out);
	fs.mkdirSync(path.dirname(outDir), {recursive: true});
	const project = openProject(args.project);
	const t0 = Date.now();
	let via = 'api';
	let renderDefaults = null;
	// Everything the bundle and its renders need, checked before a minute of bundling:
	// one error that names every missing package.
	const cli = project.has('@remotion/cli');
	project.check('@remotion/renderer', '@remotion/bundler', ...(cli ? ['@remotion/cli'] : []));
	if (cli) {
		via = 'cli';
		await bundleWithCli(project, outDir, args.cache);
		renderDefaults = await readRenderDefaults(project);
		if (renderDefaults !== null) {
			fs.writeFileSync(path.join(outDir, RENDER_DEFAULTS_FILE), JSON.stringify(renderDefaults, null, 2));
		}
	} else {
		await bundleWithApi(project, outDir, args.cache);
	}
	emit({
		type: 'bundled',
		out: outDir,
		ms: Date.now() - t0,
		via,
		remotionVersion: project.remotionVersion,
		versionWarning: project.versionWarning,
		configFile: configFileOf(project.dir),
		renderDefaults,
	});
};

// Keep stdout for the single protocol line (protocol.mjs moved console.* to stderr).
main().then(
	() => process.exit(0), // the bundler can leave handles open
	(err) => {
		const detail = [err?.stack ? String(err.stack) : String(err), err?.detail ?? ''].join('\n');
		emit({type: 'fatal', kind: err?.kind ?? 'error', message: err instanceof SetupError ? err.message : summarize(err?.message ?? err), detail});
		process.exit(1);
	},
);
