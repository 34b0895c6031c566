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

// name -> Set of every version of each Remotion package installed anywhere a project's
// packages come from: the node_modules of the project and of each ancestor (a
// workspace's root), Remotion packages nested under Remotion packages (npm puts an exactly
// pinned remotion 4.0.529 under @remotion/cli when remotion 4.0.541 sits at the top), and
// pnpm's store entries (node_modules/.pnpm/@remotion+cli@4.0.529). An installed version is
// one the registry has: the fix may name it without asking the registry (issue 22), where
// the CLI's version may not exist for a lagging package (@remotion/tailwind stops at
// 4.0.527 beside @remotion/cli 4.0.529: ETARGET).
const NESTING_LIMIT = 4; // npm nests a few levels at most; pnpm's symlinks could loop
const installedVersions = (dir) => {
	const known = new Map();
	const add = (name, version) => {
		if (!REMOTION_PACKAGE_RE.test(name) || !version) return;
		known.set(name, (known.get(name) ?? new Set()).add(String(version)));
	};
	const readVersion = (packageDir) => {
		try {
			return JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8')).version ?? null;
		} catch {
			return null; // not a package (a stray folder, a broken link): no evidence
		}
	};
	const entries = (d) => {
		try {
			return fs.readdirSync(d);
		} catch {
			return [];
		}
	};
	const walk = (nodeModules, depth) => {
		const names = [
			'remotion',
			...entries(path.join(nodeModules, '@remotion')).map((e) => `@remotion/${e}`),
		].filter((n) => REMOTION_PACKAGE_RE.test(n));
		for (const name of names) {
			const packageDir = path.join(nodeModules, name);
			const version = readVersion(packageDir);
			if (version === null) continue;
			add(name, version);
			if (depth < NESTING_LIMIT) walk(path.join(packageDir, 'node_modules'), depth + 1);
		}
		for (const entry of entries(path.join(nodeModules, '.pnpm'))) {
			const match = /^(remotion|@remotion\+[^@]+)@([^_]+)/.exec(entry);
			if (match) add(match[1].replace('+', '/'), match[2]);
		}
	};
	for (let d = dir; ; d = path.dirname(d)) {
		walk(path.join(d, 'node_modules'), 0);
		if (path.dirname(d) === d) return known;
	}
};

// How to give every Remotion package the version `target`, naming only versions known to
// exist (installed somewhere): {command, text}. `command` (or null when it would change
// nothing) pins every package whose `target` is installed somewhere; a package that has
// no installed copy at `target` is named as unknown, never offered a version the
// registry may not have.
const alignment = (versions, known, manager, target) => {
	const exists = (name) => versions.get(name) === target || (known.get(name)?.has(target) ?? false);
	const names = [...versions.keys()];
	const pinned = names.filter(exists);
	const unknown = names.filter((n) => !exists(n));
	const changes = pinned.some((n) => versions.get(n) !== target);
	const command = changes ? installCommand(manager, pinned, target) : null;
	const unknownText = unknown.length === 0 ? '' : `${unknown.map((n) => `${n} ${versions.get(n)}`).join(', ')} ${
		unknown.length > 1 ? 'have' : 'has'
	} no copy installed at ${target}, so whether ${target} exists for ${unknown.length > 1 ? 'them' : 'it'} is unknown here (${unknown
		.map((n) => `\`npm view ${n} versions\``)
		.join(', ')} lists what the registry has; pin every Remotion package to one version all of them have)`;
	const text = [command && `run \`${command}\``, unknownText].filter(Boolean).join('; ');
	return {command, text};
};

// {warning, fix} when the project's Remotion packages do not share one version, else null.
const mismatch = (versions, known, manager, target) => {
	const byVersion = new Map();
	for (const [name, version] of versions) byVersion.set(version, [...(byVersion.get(version) ?? []), name]);
	if (byVersion.size < 2) return null;
	const fix = alignment(versions, known, manager, target);
	const groups = [...byVersion.keys()].sort(compareVersions).reverse().map((v) => `${byVersion.get(v).join(', ')} ${v}`);
	return {
		fix,
		warning: `Version mismatch (Remotion's CLI warns the same and renders): ${groups.join('; ')}; to give every Remotion package one version${fix.command ? ', ' : ': '}${fix.text}`,
	};
};

// The nearest of `start` and its ancestors that holds `name`, or null.
const ancestorWith = (start, name) => {
	for (let d = start; ; d = path.dirname(d)) {
		if (fs.existsSync(path.join(d, name))) return d;
		if (path.dirname(d) === d) return null;
	}
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
		// Yarn PnP writes .pnp.cjs at the workspace's root only, and no node_modules
		// anywhere: a member project resolves nothing, and `yarn install` changes that not.
		// Looked for only here, when nothing resolves: a project with its own node_modules
		// under some PnP ancestor loads fine.
		const pnpRoot = ancestorWith(path.dirname(dir), '.pnp.cjs');
		if (pnpRoot !== null) {
			throw new SetupError(
				`${dir} uses Yarn Plug'n'Play (the workspace ${pnpRoot}), which spoolrender cannot load Remotion from: set "nodeLinker: node-modules" in .yarnrc.yml and run yarn install`,
			);
		}
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
	const known = installedVersions(dir);
	const versionProblem = mismatch(versions, known, manager, target);
	const checkVersion = (name) => {
		const version = versionOf(name);
		if (version !== null && majorOf(version) !== majorOf(remotionVersion)) {
			const fix = versionProblem?.fix ?? alignment(new Map([...versions, [name, version]]), known, manager, target);
			throw new SetupError(
				`${dir} has ${name} ${version} but remotion ${remotionVersion}, a major version apart, which cannot render: ${fix.text}`,
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
