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

const REMOTION_PACKAGE_RE = /^(remotion|@remotion\/(?!compositor-)[^/]+)$/;
const DEPENDENCY_FIELDS = ['dependencies', 'devDependencies', 'optionalDependencies', 'peerDependencies'];

// name -> version of every Remotion package the project itself resolves: remotion and
// each @remotion/* in the project's own node_modules, those its package.json declares
// (a workspace hoists them to the root's node_modules), and the renderer, bundler and
// CLI, each as require() from the project finds it. Not what merely sits in an ancestor's
// node_modules (another app's, a stray global install): the project loads none of it, and
// the CLI's "Version mismatch" resolves from the project too. The platform compositors are
// left out: they are @remotion/renderer's own pinned dependencies.
const projectVersions = (dir, manifest, fromProject) => {
	const names = new Set(['remotion', '@remotion/renderer', '@remotion/bundler', '@remotion/cli']);
	for (const field of DEPENDENCY_FIELDS) {
		for (const name of Object.keys(manifest[field] ?? {})) if (REMOTION_PACKAGE_RE.test(name)) names.add(name);
	}
	const scope = path.join(dir, 'node_modules', '@remotion');
	if (fs.existsSync(scope)) {
		for (const entry of fs.readdirSync(scope)) {
			if (REMOTION_PACKAGE_RE.test(`@remotion/${entry}`)) names.add(`@remotion/${entry}`);
		}
	}
	const versions = new Map();
	for (const name of [...names].sort()) {
		let version;
		try {
			version = fromProject(fromProject.resolve(`${name}/package.json`)).version;
		} catch (err) {
			if (!isNotFound(err) && err?.code !== 'ERR_PACKAGE_PATH_NOT_EXPORTED') throw err;
			continue;
		}
		if (version) versions.set(name, String(version));
	}
	return versions;
};

// The one version the fix gives every Remotion package: the project's own `remotion`
// command's (@remotion/cli, what `npx remotion render` runs; without it the renderer,
// which renders), when it shares remotion's major. That version exists on the registry for
// the CLI and for what it pins exactly (remotion, renderer, bundler, studio: npm installed
// them at it), where remotion's own may be newer than any @remotion/* (a half-published
// release: ETARGET) and the lowest installed may be one stray package's, years old.
const fixVersion = (versionOf, remotionVersion) =>
	[versionOf('@remotion/cli'), versionOf('@remotion/renderer')].find(
		(v) => v != null && majorOf(v) === majorOf(remotionVersion),
	) ?? remotionVersion;

// {warning, fix} when the project's Remotion packages do not share one version, else null.
const mismatch = (versions, manager, target) => {
	const byVersion = new Map();
	for (const [name, version] of versions) byVersion.set(version, [...(byVersion.get(version) ?? []), name]);
	if (byVersion.size < 2) return null;
	const fix = installCommand(manager, [...versions.keys()], target);
	const groups = [...byVersion.keys()].sort(compareVersions).reverse().map((v) => `${byVersion.get(v).join(', ')} ${v}`);
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
	// A package's version as spoolrender loads it (from the project, else from the CLI).
	const versionOf = (name) => {
		const manifest = resolveFrom(`${name}/package.json`);
		return manifest === null ? null : (fromProject(manifest).version ?? null);
	};
	const versions = projectVersions(dir, JSON.parse(fs.readFileSync(pkgJson, 'utf8')), fromProject);
	const target = fixVersion(versionOf, remotionVersion);
	// Mixed versions are what `npm install` gives whenever Remotion's packages are half
	// published (remotion 4.0.541 beside @remotion/* 4.0.529): the project's own
	// `remotion render` warns ("Version mismatch") and renders, so spoolrender does too.
	// Only a major version apart is refused: those packages do not speak one protocol.
	const versionProblem = mismatch(versions, manager, target);
	const checkVersion = (name) => {
		const version = versionOf(name);
		if (version !== null && majorOf(version) !== majorOf(remotionVersion)) {
			const fix = versionProblem?.fix ?? installCommand(manager, [...new Set([...versions.keys(), name])].sort(), target);
			throw new SetupError(
				`${dir} has ${name} ${version} but remotion ${remotionVersion}, a major version apart, which cannot render: run \`${fix}\``,
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
