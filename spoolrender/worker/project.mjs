// spoolrender: find Remotion's packages in the user's own Remotion project.
//
// These scripts ship inside the spoolrender Python package, so they live far from the
// project they render. Node would resolve bare imports ('@remotion/renderer') from
// *this* file's directory; instead every Remotion package is loaded through
// createRequire(<project>/package.json), which walks the project's node_modules (and
// its parents', for workspaces) exactly as the project's own code would. That works for
// npm and yarn (node-modules linker) trees and for pnpm's symlinked one, and it loads the
// project's own Remotion version, whatever version spoolrender was tested with.
//
// A missing package is a SetupError: no retry can fix it, so the caller reports it as a
// permanent failure whose message names the exact install command.

import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';

export class SetupError extends Error {
	constructor(message) {
		super(message);
		this.name = 'SetupError';
		this.kind = 'setup';
	}
}

// The project's package manager, from its lockfile (npm when there is none).
const packageManager = (dir) => {
	for (let d = dir; ; d = path.dirname(d)) {
		if (fs.existsSync(path.join(d, 'pnpm-lock.yaml'))) return 'pnpm';
		if (fs.existsSync(path.join(d, 'yarn.lock'))) return 'yarn';
		if (fs.existsSync(path.join(d, 'bun.lockb')) || fs.existsSync(path.join(d, 'bun.lock'))) return 'bun';
		if (fs.existsSync(path.join(d, 'package-lock.json'))) return 'npm';
		if (path.dirname(d) === d) return 'npm';
	}
};

const ADD_COMMAND = {
	npm: 'npm install --save-exact',
	pnpm: 'pnpm add --save-exact',
	yarn: 'yarn add --exact',
	bun: 'bun add --exact',
};

export const installCommand = (manager, packages, version) =>
	`${ADD_COMMAND[manager]} ${packages.map((p) => (version ? `${p}@${version}` : p)).join(' ')}`;

const isNotFound = (err) => err?.code === 'MODULE_NOT_FOUND' || err?.code === 'ERR_MODULE_NOT_FOUND';

const majorOf = (version) => String(version).split('.')[0];

// Compare two versions the way npm sorts releases (prereleases before their release).
const compareVersions = (a, b) => {
	const parse = (v) => {
		const [core, pre] = String(v).split('-', 2);
		return {core: core.split('.').map(Number), pre: pre ?? null};
	};
	const x = parse(a);
	const y = parse(b);
	for (let i = 0; i < 3; i++) if ((x.core[i] ?? 0) !== (y.core[i] ?? 0)) return (x.core[i] ?? 0) - (y.core[i] ?? 0);
	if (x.pre === y.pre) return 0;
	if (x.pre === null) return 1;
	if (y.pre === null) return -1;
	return x.pre < y.pre ? -1 : 1;
};

// name -> version of every Remotion package the project would load: remotion and each
// @remotion/* in the node_modules of the project and its ancestors (workspaces hoist
// there), plus the renderer, bundler and CLI wherever resolution finds them (pnpm).
// The platform compositors are left out: they are @remotion/renderer's own pinned
// dependencies and are fixed by installing the renderer.
const installedVersions = (dir, resolveFrom, fromProject) => {
	const names = new Set(['remotion', '@remotion/renderer', '@remotion/bundler', '@remotion/cli']);
	for (let d = dir; ; d = path.dirname(d)) {
		const scope = path.join(d, 'node_modules', '@remotion');
		if (fs.existsSync(scope)) {
			for (const entry of fs.readdirSync(scope)) {
				if (!entry.startsWith('.') && !entry.startsWith('compositor-')) names.add(`@remotion/${entry}`);
			}
		}
		if (path.dirname(d) === d) break;
	}
	const versions = new Map();
	for (const name of [...names].sort()) {
		const manifest = resolveFrom(`${name}/package.json`);
		if (manifest === null) continue;
		const version = fromProject(manifest).version;
		if (version) versions.set(name, String(version));
	}
	return versions;
};

// {warning, fix} when the installed Remotion packages do not share one version, else null.
// The fix pins every one of them to the lowest version installed of remotion's major: a
// version the registry demonstrably has (the package lagging behind is installed at it;
// Remotion publishes all its packages at each version), where the newest one (remotion's
// own, often) may not exist for the others (npm's ETARGET).
const mismatch = (versions, manager, remotionVersion) => {
	const byVersion = new Map();
	for (const [name, version] of versions) byVersion.set(version, [...(byVersion.get(version) ?? []), name]);
	if (byVersion.size < 2) return null;
	const ordered = [...byVersion.keys()].sort(compareVersions);
	const target = ordered.find((v) => majorOf(v) === majorOf(remotionVersion));
	const fix = installCommand(manager, [...versions.keys()], target);
	const groups = ordered.reverse().map((v) => `${byVersion.get(v).join(', ')} ${v}`);
	return {
		fix,
		warning: `Version mismatch (Remotion's CLI warns the same and renders): ${groups.join('; ')}; to give every Remotion package one version, run \`${fix}\``,
	};
};

// -> {dir, remotionVersion, versionWarning, manager, has(name), check(...names), load(...names), packageDir(name)}
export const openProject = (projectDir) => {
	const dir = path.resolve(projectDir);
	const pkgJson = path.join(dir, 'package.json');
	if (!fs.existsSync(pkgJson)) {
		throw new SetupError(`${dir} is not a Remotion project: it has no package.json`);
	}
	if (fs.existsSync(path.join(dir, '.pnp.cjs'))) {
		throw new SetupError(
			`${dir} uses Yarn Plug'n'Play, which spoolrender cannot load Remotion from: set "nodeLinker: node-modules" in .yarnrc.yml and run yarn install`,
		);
	}
	const fromProject = createRequire(pkgJson);
	// Starters list only @remotion/cli: npm hoists its renderer and bundler next to it, but
	// under pnpm (or npm's linked strategy) they are reachable only from the CLI's own
	// directory. So a package is looked up from the project, then from @remotion/cli.
	const requirers = [fromProject];
	const resolveFrom = (spec) => {
		for (const req of requirers) {
			try {
				return req.resolve(spec);
			} catch (err) {
				if (!isNotFound(err) && err?.code !== 'ERR_PACKAGE_PATH_NOT_EXPORTED') throw err;
			}
		}
		return null;
	};
	const cliManifest = resolveFrom('@remotion/cli/package.json');
	if (cliManifest !== null) requirers.push(createRequire(cliManifest));
	const require = (spec) => fromProject(resolveFrom(spec) ?? spec);
	const manager = packageManager(dir);
	const remotionManifest = resolveFrom('remotion/package.json');
	const remotionVersion = remotionManifest === null ? null : fromProject(remotionManifest).version;
	if (remotionVersion === null) {
		const declared = fs.existsSync(path.join(dir, 'node_modules'))
			? `its node_modules has no 'remotion' package: run \`${installCommand(manager, ['remotion'], null)}\``
			: `its node_modules is missing: run \`${manager === 'npm' ? 'npm ci' : `${manager} install`}\` in ${dir}`;
		throw new SetupError(`Remotion is not installed in ${dir}: ${declared}`);
	}
	if (!/^4\./.test(remotionVersion)) {
		throw new SetupError(
			`${dir} has Remotion ${remotionVersion}; spoolrender renders Remotion 4 projects (upgrade with \`npx remotion upgrade\`)`,
		);
	}
	const has = (name) => resolveFrom(`${name}/package.json`) !== null;
	const versions = installedVersions(dir, resolveFrom, fromProject);
	// Mixed versions are what `npm install` gives whenever Remotion's packages are half
	// published (remotion 4.0.541 beside @remotion/* 4.0.529): the project's own
	// `remotion render` warns ("Version mismatch") and renders, so spoolrender does too.
	// Only a major version apart is refused: those packages do not speak one protocol.
	const versionProblem = mismatch(versions, manager, remotionVersion);
	const checkVersion = (name) => {
		const version = versions.get(name);
		if (version !== undefined && majorOf(version) !== majorOf(remotionVersion)) {
			throw new SetupError(
				`${dir} has ${name} ${version} but remotion ${remotionVersion}, a major version apart, which cannot render: run \`${versionProblem.fix}\``,
			);
		}
	};
	const missing = (names) =>
		new SetupError(
			`${names.join(' and ')} ${names.length > 1 ? 'are' : 'is'} not installed in the Remotion project ${dir} (Remotion ${remotionVersion}): run \`${installCommand(manager, names, remotionVersion)}\` there`,
		);
	// Every one of `names` installed, at the project's Remotion version.
	const check = (...names) => {
		const absent = names.filter((n) => !has(n));
		if (absent.length > 0) throw missing(absent);
		names.forEach(checkVersion);
	};
	return {
		dir,
		remotionVersion,
		// The CLI's "Version mismatch" warning in one line (with the command that aligns
		// every Remotion package), or null when all of them share one version.
		versionWarning: versionProblem?.warning ?? null,
		manager,
		has,
		check,
		// check(), then require them (CommonJS builds: every @remotion package ships one).
		load: (...names) => {
			check(...names);
			return names.map((n) => require(n));
		},
		packageDir: (name) => path.dirname(resolveFrom(`${name}/package.json`)),
	};
};

// A dependency of an installed package (pnpm does not hoist: source-map is only
// reachable from @remotion/renderer's own directory). null when absent.
export const loadDependencyOf = (project, owner, name) => {
	try {
		return createRequire(path.join(project.packageDir(owner), 'package.json'))(name);
	} catch (err) {
		if (isNotFound(err)) return null;
		throw err;
	}
};

// The ffprobe that ships with the project's @remotion/renderer (its compositor package
// for this platform), for verifying outputs; null when there is none.
export const ffprobeOf = (project) => {
	const compositor = `@remotion/compositor-linux-${process.arch}-gnu`;
	try {
		const req = createRequire(path.join(project.packageDir('@remotion/renderer'), 'package.json'));
		const p = path.join(path.dirname(req.resolve(`${compositor}/package.json`)), 'ffprobe');
		return fs.existsSync(p) ? p : null;
	} catch (err) {
		if (isNotFound(err)) return null;
		throw err;
	}
};
