// spoolrender: the worker side of the JSON-lines protocol (see render-worker.mjs).
//
// stdout carries ONLY protocol lines: importing this module sends console.log/info/
// debug/warn (and with them all of Remotion's logging) to stderr, which the Python side
// copies into the job's run log.

const toStderr = (...args) => console.error(...args);
console.log = toStderr;
console.info = toStderr;
console.debug = toStderr;
console.warn = toStderr;

let stdoutBroken = false;
const onStdoutClosed = [];

process.stdout.on('error', () => {
	// The parent went away: there is nobody left to report to.
	stdoutBroken = true;
	for (const fn of onStdoutClosed) fn();
});

export const whenStdoutCloses = (fn) => onStdoutClosed.push(fn);

export const emit = (obj) => {
	if (stdoutBroken) return;
	process.stdout.write(JSON.stringify(obj) + '\n');
};

export const logErr = (...args) => {
	process.stderr.write('[spoolrender-worker] ' + args.join(' ') + '\n');
};

export const firstLine = (s) => {
	const lines = String(s ?? '')
		.split('\n')
		.map((l) => l.trim())
		.filter(Boolean);
	return lines[0] ?? '';
};

export const stripErrorPrefix = (s) =>
	String(s).replace(/^(?:Uncaught )?(?:[A-Z][A-Za-z]*Error|Error): /, '');

export const withTimeout = (promise, ms, label) =>
	new Promise((resolve, reject) => {
		const t = setTimeout(() => reject(new Error(`${label} timed out after ${ms} ms`)), ms);
		promise.then(
			(v) => {
				clearTimeout(t);
				resolve(v);
			},
			(e) => {
				clearTimeout(t);
				reject(e);
			},
		);
	});

// `--name value` / `--name=value` arguments; `spec` maps names to keys of `defaults`.
export const parseArgs = (argv, spec, defaults) => {
	const out = {...defaults};
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const eq = a.indexOf('=');
		const name = eq === -1 ? a : a.slice(0, eq);
		const key = spec[name];
		if (key === undefined) throw new Error(`Unknown argument: ${a}`);
		if (typeof defaults[key] === 'boolean') {
			out[key] = !defaults[key];
			continue;
		}
		if (eq !== -1) out[key] = a.slice(eq + 1);
		else if (argv[i + 1] === undefined) throw new Error(`Missing value for ${name}`);
		else out[key] = argv[++i];
	}
	return out;
};
