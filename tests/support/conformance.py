"""Remotion project shapes as users have them, rendered by the project's own CLI (the
oracle) and compared with spoolrender's outputs: tests/remotion/test_conformance.py and
bench/cli_ratio.py share them.

Each :class:`Shape` is a project written into a temp dir (nothing fetched: its
node_modules is a symlink to an installed tree, remotion/node_modules or one that
``scripts/setup.sh --test`` installed under .cache/) and the renders made of it: videos
with ``npx remotion render``, stills with ``npx remotion still``, each also a spoolrender
job. Projects are tiny (at most a second of video at 160x90 or less) because the CLI
bundles the project again for every render.

The comparison decodes both outputs with the ffmpeg and ffprobe that ship with
``@remotion/renderer`` (Debian has none here): stream kinds, sizes, frame counts,
durations, audio sample counts, and the PSNR of every frame (tiny frames: all of them, in
pure Python, as that ffmpeg has no psnr filter) and of the PCM audio.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import struct
import subprocess
import wave
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.node_modules import link_node_modules

REPO = Path(__file__).resolve().parents[2]
REMOTION_MODULES = REPO / "remotion" / "node_modules"
MIXED_MODULES = REPO / ".cache" / "remotion-mixed" / "node_modules"  # scripts/setup.sh --test
# Tailwind's, React Three Fiber's and Skia's packages, one tree at 4.0.527 (scripts/setup.sh
# --test): @remotion/tailwind-v4 and @remotion/three have no 4.0.529, @remotion/skia stops at 4.0.508.
SHAPES_MODULES = REPO / ".cache" / "remotion-shapes" / "node_modules"
SHAPES_REMOTION = "4.0.527"
COMPOSITOR = REMOTION_MODULES / "@remotion/compositor-linux-x64-gnu"
CHROMIUM = "/usr/bin/chromium"
PIXEL_TOLERANCE = 24  # per channel: h264's 4:2:0 chroma and limited range shift flat colours a little
MIN_PSNR_DB = 60.0  # issue 22: "PSNR >= 60 dB on sampled frames"; identical frames are inf
CLI_TIMEOUT_S = 600.0  # a bundle and a render on a loaded 2-core host

REMOTION_DEPS = {"remotion": "4.0.529", "@remotion/cli": "4.0.529", "react": "19.2.0", "react-dom": "19.2.0"}
# Remotion's CLI loads a .ts config only next to a tsconfig.json (as every starter has).
TSCONFIG = json.dumps(
    {
        "compilerOptions": {
            "jsx": "react-jsx",
            "module": "es2022",
            "target": "es2022",
            "moduleResolution": "bundler",
            "strict": True,
            "skipLibCheck": True,
        }
    }
)


def png(rgb: tuple[int, int, int], width: int = 16, height: int = 16) -> bytes:
    """A PNG with a diagonal gradient over ``rgb`` (zlib and struct: no imaging library)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = []
    for y in range(height):
        shade = [min(255, c + 8 * ((x + y) % 16)) for x in range(width) for c in rgb]
        rows.append(b"\0" + bytes(shade))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + chunk(b"IEND", b"")
    )


def tone_wav(seconds: float, rate: int = 22050) -> bytes:
    """A square wave, mono 16-bit: a public/ audio file whose length decides a duration."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        period = rate // 440
        out.writeframes(b"".join(struct.pack("<h", 8000 if i % period < period // 2 else -8000)
                                 for i in range(int(rate * seconds))))  # fmt: skip
    return buffer.getvalue()


@dataclass(frozen=True)
class Render:
    """One render of a shape: ``npx remotion render|still <composition> <output>``, and the
    same as a spoolrender job (``still: true`` for a still).

    ``pixel``: (x, y, rgb) that frame 0 of the CLI's output shows there (each channel within
    :data:`PIXEL_TOLERANCE`), so a shape whose point did not apply (Tailwind's classes left
    unstyled, a WebGL scene left blank) fails, though both sides would agree on it."""

    composition: str
    output: str  # a file name: its suffix picks the format on both sides
    still: bool = False
    pixel: tuple[int, int, tuple[int, int, int]] | None = None

    def __post_init__(self) -> None:
        if Path(self.output).name != self.output:
            raise ValueError(f"output must be a file name, got {self.output!r}")

    def cli_argv(self, out: Path) -> list[str]:
        command = "still" if self.still else "render"
        # --no: npx runs the project's own bin or fails; it never fetches a package.
        return ["npx", "--no", "remotion", command, self.composition, str(out), f"--browser-executable={CHROMIUM}",
                "--log=error"]  # fmt: skip

    def job(self) -> dict[str, Any]:
        job: dict[str, Any] = {"composition": self.composition, "output": self.output}
        if self.still:
            job["still"] = True
        return job


@dataclass(frozen=True)
class Shape:
    """A project as users lay it out, and what the conformance suite renders of it."""

    name: str
    files: Mapping[str, str | bytes]
    renders: tuple[Render, ...]
    node_modules: Path = REMOTION_MODULES
    dependencies: Mapping[str, str] = field(default_factory=lambda: dict(REMOTION_DEPS))

    def __post_init__(self) -> None:
        if not self.renders:
            raise ValueError(f"shape {self.name!r} renders nothing")

    def write(self, parent: Path) -> Path:
        """The project, as ``parent/<name>``; its node_modules a symlink (nothing installed)."""
        root = parent / self.name
        root.mkdir(parents=True)
        package = {"name": self.name, "private": True, "dependencies": dict(self.dependencies)}
        (root / "package.json").write_text(json.dumps(package, indent=2), encoding="utf-8")
        for rel, content in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        link_node_modules(root, self.node_modules)
        return root


def run_cli(project: Path, render: Render, out: Path, timeout: float = CLI_TIMEOUT_S) -> None:
    """The project's own CLI, in its directory, as a user types it (its output in the
    error). In a session of its own: on a timeout the whole group goes (a SIGTERM to npx
    alone would leave the render running)."""
    with subprocess.Popen(
        render.cli_argv(out), cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    ) as proc:  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    if proc.returncode != 0 or not out.is_file():
        text = output.decode(errors="replace")[-4000:]
        raise AssertionError(f"{' '.join(render.cli_argv(out))} (in {project}): exit {proc.returncode}\n{text}")


# --- comparing two outputs --------------------------------------------------------------


@dataclass(frozen=True)
class Media:
    """What ffprobe and a decode say about one output."""

    streams: tuple[tuple[str, int, int], ...]  # (codec_type, width, height); audio 0x0
    frames: int
    duration: float | None  # seconds (container); None for an image
    audio_samples: int
    audio_duration: float | None


def _tool(name: str) -> str:
    return str(COMPOSITOR / name)


def probe(path: Path) -> Media:
    out = subprocess.run(
        [_tool("ffprobe"), "-v", "error", "-count_frames", "-show_entries",
         "stream=codec_type,width,height,nb_read_frames,duration:format=duration", "-of", "json", str(path)],
        capture_output=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    data = json.loads(out)
    streams = tuple((s["codec_type"], int(s.get("width", 0)), int(s.get("height", 0))) for s in data["streams"])
    video = [s for s in data["streams"] if s["codec_type"] == "video"]
    audio = [s for s in data["streams"] if s["codec_type"] == "audio"]
    duration = data.get("format", {}).get("duration")
    return Media(
        streams=streams,
        frames=sum(int(s.get("nb_read_frames", 0)) for s in video),
        duration=None if duration is None or path.suffix == ".png" else float(duration),
        audio_samples=len(pcm(path)) // 4 if audio else 0,
        audio_duration=float(audio[0]["duration"]) if audio and "duration" in audio[0] else None,
    )


def frames(path: Path, width: int, height: int) -> list[bytes]:
    """Every frame as raw RGB (width * height * 3 bytes each)."""
    out = subprocess.run(
        # Remotion's ffmpeg has no rawvideo muxer: raw frames go through image2pipe.
        [_tool("ffmpeg"), "-v", "error", "-i", str(path), "-f", "image2pipe", "-c:v", "rawvideo",
         "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    size = width * height * 3
    assert len(out) % size == 0, f"{path}: {len(out)} bytes of frames is no whole number of {width}x{height}"
    return [out[i : i + size] for i in range(0, len(out), size)]


def pcm(path: Path) -> bytes:
    """The audio as 16-bit stereo 48 kHz PCM (a WAV stream: that ffmpeg has no raw PCM muxer)."""
    out = subprocess.run(
        [_tool("ffmpeg"), "-v", "error", "-i", str(path), "-vn", "-ac", "2", "-ar", "48000", "-c:a", "pcm_s16le",
         "-f", "wav", "-"],
        capture_output=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return _wav_data(out)


def _wav_data(stream: bytes) -> bytes:
    """The data chunk of a WAV written to a pipe (its sizes may be unset: to the end)."""
    pos = 12
    while pos + 8 <= len(stream):
        kind, size = stream[pos : pos + 4], struct.unpack("<I", stream[pos + 4 : pos + 8])[0]
        if kind == b"data":
            return stream[pos + 8 :]
        pos += 8 + size
    raise AssertionError("no data chunk in ffmpeg's WAV output")


def psnr(a: bytes, b: bytes, peak: float = 255.0) -> float:
    """Of two 8-bit sample strings of one length; inf when identical."""
    assert len(a) == len(b), (len(a), len(b))
    if a == b:
        return math.inf
    squared = sum((x - y) * (x - y) for x, y in zip(a, b, strict=True))
    return 10 * math.log10(peak * peak * len(a) / squared)


def pcm_psnr(a: bytes, b: bytes) -> float:
    """Of two 16-bit PCM strings of one length; inf when identical."""
    assert len(a) == len(b), (len(a), len(b))
    if a == b:
        return math.inf
    xs = struct.unpack(f"<{len(a) // 2}h", a)
    ys = struct.unpack(f"<{len(b) // 2}h", b)
    squared = sum((x - y) * (x - y) for x, y in zip(xs, ys, strict=True))
    return 10 * math.log10(32767.0 * 32767.0 * len(xs) / squared)


def differences(cli: Path, ours: Path) -> list[str]:
    """How spoolrender's output ``ours`` differs from the CLI's ``cli`` (empty: it does not)."""
    want, got = probe(cli), probe(ours)
    problems = [
        f"{what}: CLI {a}, spoolrender {b}"
        for what, a, b in (
            ("streams", want.streams, got.streams),
            ("frames", want.frames, got.frames),
            ("audio samples", want.audio_samples, got.audio_samples),
        )
        if a != b
    ]
    timed = (("duration", want.duration, got.duration), ("audio duration", want.audio_duration, got.audio_duration))
    for what, a, b in timed:
        if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > 1e-3):
            problems.append(f"{what}: CLI {a}, spoolrender {b}")
    if problems:
        return problems
    (_, width, height) = next(s for s in want.streams if s[0] == "video")
    pairs = zip(frames(cli, width, height), frames(ours, width, height), strict=True)
    for index, (cli_frame, our_frame) in enumerate(pairs):
        value = psnr(cli_frame, our_frame)
        if value < MIN_PSNR_DB:
            problems.append(f"frame {index}: PSNR {value:.1f} dB < {MIN_PSNR_DB:g} dB")
    if want.audio_samples:
        value = pcm_psnr(pcm(cli), pcm(ours))
        if value < MIN_PSNR_DB:
            problems.append(f"audio: PSNR {value:.1f} dB < {MIN_PSNR_DB:g} dB")
    return problems


def pixel_problem(cli: Path, render: Render) -> str | None:
    """How frame 0 of the CLI's output misses ``render.pixel`` (None: it shows it)."""
    if render.pixel is None:
        return None
    x, y, want = render.pixel
    (_, width, height) = next(s for s in probe(cli).streams if s[0] == "video")
    first = frames(cli, width, height)[0]
    got = tuple(first[(y * width + x) * 3 : (y * width + x) * 3 + 3])
    if any(abs(a - b) > PIXEL_TOLERANCE for a, b in zip(got, want, strict=True)):
        return f"the CLI's frame 0 shows rgb{got} at ({x}, {y}), not rgb{want}: the shape's point did not apply"
    return None


# --- the shapes ---------------------------------------------------------------------------

RED, TEAL = (200, 30, 40), (20, 140, 150)

# Remotion's TypeScript hello-world: src/index.ts, src/Root.tsx, public/ assets; a moving
# picture from public/, a still (<Still>), and an audiogram whose length comes from its
# audio file through calculateMetadata.
TYPESCRIPT = Shape(
    name="typescript-starter",
    dependencies={**REMOTION_DEPS, "@remotion/media-utils": "4.0.529"},
    files={
        "tsconfig.json": TSCONFIG,
        "src/index.ts": "import {registerRoot} from 'remotion';\nimport {RemotionRoot} from './Root';\n"
        "registerRoot(RemotionRoot);\n",
        "src/Root.tsx": """
import {getAudioDurationInSeconds} from '@remotion/media-utils';
import {AbsoluteFill, Audio, Composition, Img, interpolate, staticFile, Still, useCurrentFrame} from 'remotion';

const Moving: React.FC<{title: string}> = ({title}) => {
  const frame = useCurrentFrame();
  const left = interpolate(frame, [0, 11], [0, 120]);
  return (
    <AbsoluteFill style={{background: `rgb(${frame * 20}, 60, 120)`, fontFamily: 'sans-serif'}}>
      <Img src={staticFile('logo.png')} style={{position: 'absolute', left, top: 20, width: 40, height: 40}} />
      <div style={{position: 'absolute', bottom: 8, left: 8, color: 'white', fontSize: 14}}>{title} {frame}</div>
    </AbsoluteFill>
  );
};

const Poster: React.FC = () => (
  <AbsoluteFill style={{background: 'linear-gradient(90deg, #123, #c84)', alignItems: 'center',
    justifyContent: 'center', color: 'white', fontSize: 18}}>
    <Img src={staticFile('logo.png')} style={{width: 32, height: 32}} />
    OG image
  </AbsoluteFill>
);

const Audiogram: React.FC = () => {
  const frame = useCurrentFrame();
  return (
    <AbsoluteFill style={{background: 'black'}}>
      <Audio src={staticFile('tone.wav')} />
      <div style={{position: 'absolute', left: 0, bottom: 0, width: frame * 10, height: 20 + (frame % 5) * 10,
        background: 'rgb(20, 220, 120)'}} />
    </AbsoluteFill>
  );
};

export const RemotionRoot: React.FC = () => (
  <>
    <Composition id="Moving" component={Moving} width={160} height={90} fps={30} durationInFrames={12}
      defaultProps={{title: 'Hello'}} />
    <Still id="Poster" component={Poster} width={160} height={90} />
    <Composition id="Audiogram" component={Audiogram} width={96} height={64} fps={30} durationInFrames={1}
      calculateMetadata={async () => ({
        durationInFrames: Math.ceil((await getAudioDurationInSeconds(staticFile('tone.wav'))) * 30),
      })} />
  </>
);
""",
        "public/logo.png": png(RED),
        "public/tone.wav": tone_wav(0.4),
    },
    renders=(
        Render("Moving", "moving.mp4"),
        Render("Poster", "poster.png", still=True),
        Render("Audiogram", "audiogram.mp4"),
    ),
)

# Remotion's JavaScript hello-world: src/index.js and .jsx components, no tsconfig.
JAVASCRIPT = Shape(
    name="javascript-starter",
    files={
        "src/index.js": "import {registerRoot} from 'remotion';\nimport {RemotionRoot} from './Root';\n"
        "registerRoot(RemotionRoot);\n",
        "src/Root.jsx": """
import {Composition} from 'remotion';
import {HelloWorld} from './HelloWorld';
export const RemotionRoot = () => (
  <Composition id="HelloWorld" component={HelloWorld} width={128} height={72} fps={30} durationInFrames={10}
    defaultProps={{titleText: 'Welcome', titleColor: 'rgb(255, 220, 0)'}} />
);
""",
        "src/HelloWorld.jsx": """
import {AbsoluteFill, spring, useCurrentFrame, useVideoConfig} from 'remotion';
export const HelloWorld = ({titleText, titleColor}) => {
  const frame = useCurrentFrame();
  const {fps} = useVideoConfig();
  const scale = spring({frame, fps});
  return (
    <AbsoluteFill style={{background: 'white', alignItems: 'center', justifyContent: 'center'}}>
      <h1 style={{color: titleColor, fontSize: 20, transform: `scale(${scale})`}}>{titleText}</h1>
    </AbsoluteFill>
  );
};
""",
    },
    renders=(Render("HelloWorld", "hello.mp4"),),
)

# Remotion inside a Next.js app: the entry point nested in src/remotion/ (the CLI finds it
# there), the app's own pages beside it (not bundled), public/ at the app's root, and a
# remotion.config.ts whose webpack override adds a CSS loader and an alias, as
# @remotion/tailwind's enableTailwind does (Tailwind itself is not installed here: no
# network at test time but npm's, and its install would cost CI time).
NEXT_APP = Shape(
    name="next-app",
    dependencies={**REMOTION_DEPS, "next": "15.0.0"},
    files={
        "tsconfig.json": TSCONFIG,
        "remotion.config.ts": """
import path from 'node:path';
import {Config} from '@remotion/cli/config';

Config.setCrf(28); // a render default: both must apply it (18 is Remotion's own)
Config.overrideWebpackConfig((config) => ({
  ...config,
  resolve: {...config.resolve, alias: {...(config.resolve?.alias ?? {}), '@/theme': path.resolve('src/theme')}},
  module: {
    ...config.module,
    rules: [...(config.module?.rules ?? []), {test: /\\.css$/, enforce: 'pre', use: [path.resolve('css-tokens.cjs')]}],
  },
}));
""",
        "css-tokens.cjs": "module.exports = (source) => source.replace(/--brand/g, 'rgb(20, 140, 150)');\n",
        "src/app/page.tsx": "export default function Page() {\n  return <main>The app, not bundled</main>;\n}\n",
        "src/theme/index.ts": "export const accent = 'rgb(240, 200, 40)';\n",
        "src/remotion/index.ts": "import {registerRoot} from 'remotion';\nimport {RemotionRoot} from './Root';\n"
        "registerRoot(RemotionRoot);\n",
        "src/remotion/styles.css": ".card { background: --brand; border-radius: 8px; }\n",
        "src/remotion/Root.tsx": """
import {AbsoluteFill, Composition, Img, interpolate, staticFile, useCurrentFrame} from 'remotion';
import {accent} from '@/theme';
import './styles.css';
const Main: React.FC = () => {
  const frame = useCurrentFrame();
  return (
    <AbsoluteFill style={{background: accent}}>
      <div className="card"
        style={{position: 'absolute', left: 10, top: 10, width: interpolate(frame, [0, 9], [20, 100]), height: 40}} />
      <Img src={staticFile('teal.png')} style={{position: 'absolute', right: 4, bottom: 4, width: 24}} />
    </AbsoluteFill>
  );
};
export const RemotionRoot: React.FC = () => (
  <Composition id="NextVideo" component={Main} width={128} height={72} fps={30} durationInFrames={10} />
);
""",
        "public/teal.png": png(TEAL),
    },
    renders=(Render("NextVideo", "next.mp4"),),
)

# A starter installed as the registry gives it today (issue 22): remotion 4.0.541 beside
# @remotion/cli and the rest at 4.0.529; the CLI warns "Version mismatch" and renders.
MIXED = Shape(
    name="mixed-versions",
    node_modules=MIXED_MODULES,
    dependencies={"remotion": "^4.0.0", "@remotion/cli": "^4.0.0", "react": "19.2.0", "react-dom": "19.2.0"},
    files={
        "src/index.ts": "import {registerRoot} from 'remotion';\nimport {Root} from './Root';\nregisterRoot(Root);\n",
        "src/Root.tsx": """
import {AbsoluteFill, Composition, useCurrentFrame} from 'remotion';
const Hello = () => {
  const frame = useCurrentFrame();
  return <AbsoluteFill style={{background: `rgb(0, ${100 + frame * 15}, 60)`, color: 'white'}}>v{frame}</AbsoluteFill>;
};
export const Root = () => (
  <Composition id="HelloWorld" component={Hello} width={64} height={64} fps={30} durationInFrames={8} />
);
""",
    },
    renders=(Render("HelloWorld", "mixed.mp4"),),
)

SHAPES_DEPS = {"remotion": SHAPES_REMOTION, "@remotion/cli": SHAPES_REMOTION, "react": "19.2.0", "react-dom": "19.2.0"}

# Remotion's Tailwind starter (Tailwind 4): remotion.config.ts hands the webpack config to
# @remotion/tailwind-v4's enableTailwind; the classes, an arbitrary value among them, exist
# only if Tailwind ran in the bundle.
TAILWIND = Shape(
    name="tailwind",
    node_modules=SHAPES_MODULES,
    dependencies={**SHAPES_DEPS, "@remotion/tailwind-v4": SHAPES_REMOTION},
    files={
        "tsconfig.json": TSCONFIG,
        "remotion.config.ts": "import {Config} from '@remotion/cli/config';\n"
        "import {enableTailwind} from '@remotion/tailwind-v4';\n\nConfig.overrideWebpackConfig(enableTailwind);\n",
        "src/index.css": '@import "tailwindcss";\n',
        "src/index.ts": "import {registerRoot} from 'remotion';\nimport {RemotionRoot} from './Root';\n"
        "registerRoot(RemotionRoot);\n",
        "src/Root.tsx": """
import {AbsoluteFill, Composition, interpolate, useCurrentFrame} from 'remotion';
import './index.css';
const Card: React.FC = () => {
  const frame = useCurrentFrame();
  return (
    <AbsoluteFill className="bg-[#c81e28] items-center justify-center">
      <div className="rounded-lg bg-[#f0c828] text-xs font-bold text-slate-900 px-2"
        style={{width: interpolate(frame, [0, 9], [40, 100])}}>Tailwind {frame}</div>
    </AbsoluteFill>
  );
};
export const RemotionRoot: React.FC = () => (
  <Composition id="TailwindCard" component={Card} width={128} height={72} fps={30} durationInFrames={10} />
);
""",
    },
    renders=(Render("TailwindCard", "tailwind.mp4", pixel=(4, 4, (200, 30, 40))),),
)

# Remotion's React Three Fiber starter: <ThreeCanvas> from @remotion/three, a lit turning
# box. Its gl: the starter's own 'angle' gets no WebGL context on a headless host (the CLI
# fails the same way: tests/integration/test_webgl_rule.py), so the config says swangle, as docs/projects.md's fix.
THREE = Shape(
    name="react-three-fiber",
    node_modules=SHAPES_MODULES,
    dependencies={**SHAPES_DEPS, "@remotion/three": SHAPES_REMOTION, "three": "0.187.0", "@react-three/fiber": "9.8.2"},
    files={
        "tsconfig.json": TSCONFIG,
        "remotion.config.ts": "import {Config} from '@remotion/cli/config';\n\n"
        "Config.setChromiumOpenGlRenderer('swangle');\n",
        "src/index.ts": "import {registerRoot} from 'remotion';\nimport {RemotionRoot} from './Root';\n"
        "registerRoot(RemotionRoot);\n",
        "src/Root.tsx": """
import {ThreeCanvas} from '@remotion/three';
import {Composition, useCurrentFrame, useVideoConfig} from 'remotion';
const Scene: React.FC = () => {
  const frame = useCurrentFrame();
  const {width, height} = useVideoConfig();
  return (
    <ThreeCanvas width={width} height={height} style={{background: 'rgb(10, 10, 40)'}}
      camera={{fov: 50, position: [0, 0, 3]}}>
      <ambientLight intensity={1.5} />
      <pointLight position={[3, 3, 3]} intensity={30} />
      <mesh rotation={[frame * 0.1, frame * 0.15, 0]}>
        <boxGeometry args={[1, 1, 1]} />
        <meshStandardMaterial color="rgb(240, 120, 20)" />
      </mesh>
      <mesh position={[0, 0, -1]}>
        <planeGeometry args={[20, 20]} />
        <meshBasicMaterial color="rgb(20, 140, 150)" />
      </mesh>
    </ThreeCanvas>
  );
};
export const RemotionRoot: React.FC = () => (
  <Composition id="ThreeScene" component={Scene} width={128} height={72} fps={30} durationInFrames={8} />
);
""",
    },
    renders=(Render("ThreeScene", "three.mp4", pixel=(4, 4, TEAL)),),
)

# Remotion's Skia starter: CanvasKit loaded (LoadSkia) before registerRoot, @remotion/skia's
# enableSkia in the webpack config (it copies canvaskit.wasm into the bundle), a
# <SkiaCanvas>; gl swangle as above (CanvasKit needs WebGL). @remotion/skia 4.0.508 beside
# remotion 4.0.527 is what a Skia user gets: a "Version mismatch" warning on both sides.
SKIA = Shape(
    name="skia",
    node_modules=SHAPES_MODULES,
    dependencies={**SHAPES_DEPS, "@remotion/skia": "4.0.508", "@shopify/react-native-skia": "2.2.12"},
    files={
        "tsconfig.json": TSCONFIG,
        "remotion.config.ts": "import {Config} from '@remotion/cli/config';\n"
        "import {enableSkia} from '@remotion/skia/enable';\n\nConfig.overrideWebpackConfig(enableSkia);\n"
        "Config.setChromiumOpenGlRenderer('swangle');\n",
        "src/index.ts": """
import {LoadSkia} from '@shopify/react-native-skia/lib/module/web';
import {continueRender, delayRender, registerRoot} from 'remotion';
const waiting = delayRender('Loading CanvasKit');
LoadSkia().then(async () => {
  const {RemotionRoot} = await import('./Root');
  registerRoot(RemotionRoot);
  continueRender(waiting);
});
""",
        "src/Root.tsx": """
import {SkiaCanvas} from '@remotion/skia';
import {Circle, Fill} from '@shopify/react-native-skia';
import {Composition, useCurrentFrame, useVideoConfig} from 'remotion';
const Drawing: React.FC = () => {
  const frame = useCurrentFrame();
  const {width, height} = useVideoConfig();
  return (
    <SkiaCanvas width={width} height={height}>
      <Fill color="rgb(20, 140, 150)" />
      <Circle cx={30 + frame * 8} cy={height / 2} r={18} color="rgb(240, 200, 40)" />
    </SkiaCanvas>
  );
};
export const RemotionRoot: React.FC = () => (
  <Composition id="SkiaDrawing" component={Drawing} width={128} height={72} fps={30} durationInFrames={8} />
);
""",
    },
    renders=(Render("SkiaDrawing", "skia.mp4", pixel=(4, 4, TEAL)),),
)

SHAPES = (TYPESCRIPT, JAVASCRIPT, NEXT_APP, MIXED, TAILWIND, THREE, SKIA)
