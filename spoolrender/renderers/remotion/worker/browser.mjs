// spoolrender: the worker's one long-lived Chromium, and the stray processes around it.

import fs from 'node:fs';
import path from 'node:path';
import {logErr, withTimeout} from './protocol.mjs';

// Must run before openBrowser: a failed path check inside openBrowser poisons every
// later openBrowser call in the same Node process (measured with Remotion 4.0.529).
export const checkBrowserPath = (p) => {
	if (!path.isAbsolute(p)) {
		throw new Error(`--browser-executable must be an absolute path, got '${p}'`);
	}
	if (!fs.existsSync(p)) {
		throw new Error(`Browser executable '${p}' does not exist (install it with: apt-get install chromium)`);
	}
	try {
		fs.accessSync(p, fs.constants.X_OK);
	} catch {
		throw new Error(`Browser executable '${p}' is not executable`);
	}
};

// Direct children of this process, from /proc (no dependency for one listing).
const directChildren = () => {
	const out = [];
	let names = [];
	try {
		names = fs.readdirSync('/proc');
	} catch {
		return out;
	}
	for (const name of names) {
		if (!/^\d+$/.test(name)) continue;
		try {
			const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
			const close = stat.lastIndexOf(')');
			const comm = stat.slice(stat.indexOf('(') + 1, close);
			const ppid = Number(stat.slice(close + 2).split(' ')[1]);
			if (ppid === process.pid) out.push({pid: Number(name), comm});
		} catch {
			// the process went away meanwhile
		}
	}
	return out;
};

export class BrowserHost {
	// renderer: the project's @remotion/renderer; onGone(why): the DevTools socket closed.
	constructor(renderer, {executable, logLevel, chromiumOptions}, onGone) {
		this.renderer = renderer;
		this.executable = executable;
		this.logLevel = logLevel;
		this.chromiumOptions = chromiumOptions ?? {};
		this.onGone = onGone;
		this.browser = null;
		this.pid = null; // our Chromium's browser process (from DevTools)
		this.dead = false;
		this.launches = 0;
		this.closing = false;
		this.gl = null; // the OpenGL backend the running browser was launched with
	}

	// gl: a job's `gl` setting; the project's (remotion.config.ts) or Chromium's otherwise.
	async launch(gl = null) {
		checkBrowserPath(this.executable);
		this.launches++;
		const b = await this.renderer.openBrowser('chrome', {
			browserExecutable: this.executable,
			chromeMode: 'headless-shell',
			chromiumOptions: gl === null ? this.chromiumOptions : {...this.chromiumOptions, gl},
			logLevel: this.logLevel,
		});
		this.browser = b;
		this.gl = gl;
		this.dead = false;
		this.pid = null;
		try {
			const info = await withTimeout(b.connection.send('SystemInfo.getProcessInfo'), 5000, 'SystemInfo.getProcessInfo');
			const main = info?.value?.processInfo?.find((p) => p.type === 'browser');
			if (main && Number.isInteger(main.id)) this.pid = main.id;
		} catch (e) {
			logErr('could not get the browser pid:', e?.message ?? e);
		}
		// Notice a dead browser (crash, kill, OOM) as soon as its DevTools socket closes.
		try {
			const ws = b.connection?.transport?.websocket;
			if (ws && typeof ws.on === 'function') {
				ws.on('close', () => {
					if (this.browser === b && !this.closing) this.markDead('DevTools connection closed');
				});
			}
		} catch (e) {
			logErr('could not watch the browser connection:', e?.message ?? e);
		}
		return b;
	}

	markDead(why) {
		if (this.dead) return;
		this.dead = true;
		logErr(`browser disconnected (${why})`);
		this.onGone(why);
	}

	async healthy() {
		if (!this.browser || this.dead) return false;
		try {
			await withTimeout(this.browser.connection.send('Browser.getVersion'), 5000, 'Browser health check');
			return true;
		} catch (e) {
			logErr('browser health check failed:', e?.message ?? e);
			return false;
		}
	}

	// A live browser for the next render, launched with the job's GL backend: the old
	// one is closed and replaced if it died, or if it runs another backend (Chromium
	// picks its GL backend at launch only).
	async ensure(jobRunning, gl = null) {
		if (await this.healthy()) {
			if (this.gl === gl) return;
			logErr(`relaunching the browser with GL backend ${gl ?? 'default'} (was ${this.gl ?? 'default'})`);
			await this.close();
		} else {
			await this.close();
			this.dead = true;
			this.reapStrays('before relaunching the browser', jobRunning);
		}
		await this.launch(gl);
	}

	async close() {
		const b = this.browser;
		this.browser = null;
		this.pid = null;
		if (!b) return;
		this.closing = true;
		try {
			await withTimeout(b.close({silent: true}), 5000, 'Closing the browser');
		} catch (e) {
			logErr('closing the browser failed:', e?.message ?? e);
		} finally {
			this.closing = false;
		}
	}

	// When the browser dies mid-render, Remotion's own replacement browser and the job's
	// ffmpeg can outlive the failed render. SIGKILL such direct children: Chromium that
	// is not our current browser, ffmpeg only while no job runs.
	reapStrays(why, jobRunning) {
		for (const {pid, comm} of directChildren()) {
			const isBrowser = /chrom|headless/i.test(comm);
			const isFfmpeg = /ffmpeg|ffprobe/i.test(comm);
			if ((isBrowser && pid !== this.pid) || (isFfmpeg && !jobRunning)) {
				try {
					process.kill(pid, 'SIGKILL');
					logErr(`killed stray ${comm} ${pid} (${why})`);
				} catch {
					// already gone
				}
			}
		}
	}
}
