"""A frame-based render command for chunked-rendering tests: one line per frame.

    frames.py span  PROPS_FILE                        prints "FRAMES 0 <frames-1> <fps>"
    frames.py whole PROPS_FILE OUTPUT                 writes every frame's line
    frames.py chunk PROPS_FILE INDEX FIRST LAST DIR   writes DIR/frames.txt for FIRST..LAST
    frames.py join  PROPS_FILE PARTS_FILE OUTPUT      concatenates the parts, checking that
                                                      each holds exactly its frames and that
                                                      they follow on (exit 65 otherwise)

props: frames (default 40), fps (default 10), sleep (seconds per frame), marker (append
"<index> <attempt> <pid>" per chunk render), fail_index + fail_until_attempt (that chunk
exits 75 while its attempt is lower), fail_index + fail_for_good (that chunk exits 65),
barrier_dir + barrier (each chunk waits until this many chunks have started: proves
that several runners render at once), host_dir (each chunk render creates the file
"<index>.<hostname>.<pid>" there: which host rendered it), pid_dir (each chunk writes its pid there), hang_index
(that chunk renders very slowly: sleep 600 s).
"""

import json
import os
import socket
import sys
import time


def line(frame: int) -> str:
    return f"frame {frame}\n"


mode, props_file = sys.argv[1], sys.argv[2]
with open(props_file) as fh:
    props = json.load(fh)
frames, fps = int(props.get("frames", 40)), float(props.get("fps", 10))

if mode == "span":
    print(f"FRAMES 0 {frames - 1} {fps:g}", flush=True)
elif mode == "whole":
    with open(sys.argv[3], "w") as out:
        out.writelines(line(i) for i in range(frames))
elif mode == "chunk":
    index, first, last, directory = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    attempt = int(os.environ.get("SPOOLRENDER_ATTEMPT", "1"))  # not shown to a cached job
    if props.get("pid_dir"):
        with open(os.path.join(props["pid_dir"], f"{index}.tmp"), "w") as fh:
            fh.write(str(os.getpid()))
        os.rename(os.path.join(props["pid_dir"], f"{index}.tmp"), os.path.join(props["pid_dir"], str(index)))
    if props.get("barrier_dir"):
        open(os.path.join(props["barrier_dir"], str(index)), "w").close()
        deadline = time.monotonic() + 120
        while len(os.listdir(props["barrier_dir"])) < int(props["barrier"]):
            if time.monotonic() > deadline:
                print("barrier not reached", flush=True)
                sys.exit(75)
            time.sleep(0.05)
    if index == props.get("fail_index") and attempt < int(props.get("fail_until_attempt", 0)):
        print(f"chunk {index}: transient trouble on attempt {attempt}", flush=True)
        sys.exit(75)
    if index == props.get("fail_index") and props.get("fail_for_good"):
        print(f"chunk {index}: this frame range cannot be rendered", flush=True)
        sys.exit(65)
    delay = 600.0 if index == props.get("hang_index") else float(props.get("sleep", 0))
    with open(os.path.join(directory, "frames.txt"), "w") as out:
        for frame in range(first, last + 1):
            time.sleep(delay)
            out.write(line(frame))
            print(f"PROGRESS {(frame - first + 1) / (last - first + 1):.3f}", flush=True)
    if props.get("host_dir"):
        open(os.path.join(props["host_dir"], f"{index}.{socket.gethostname()}.{os.getpid()}"), "w").close()
    if props.get("marker"):
        with open(props["marker"], "a") as fh:
            fh.write(f"{index} {attempt} {os.getpid()}\n")
elif mode == "join":
    parts_file, output = sys.argv[3], sys.argv[4]
    expected = 0
    joined = []
    with open(parts_file) as fh:
        for entry in fh:
            start, end, directory = entry.rstrip("\n").split(" ", 2)
            if int(start) != expected:
                print(f"gap before frame {start}: expected {expected}", flush=True)
                sys.exit(65)
            with open(os.path.join(directory, "frames.txt")) as part:
                text = part.read()
            if text != "".join(line(i) for i in range(int(start), int(end) + 1)):
                print(f"chunk {start}-{end} does not hold exactly its frames", flush=True)
                sys.exit(65)
            joined.append(text)
            expected = int(end) + 1
    if expected != frames:
        print(f"the parts end at frame {expected - 1}, the video has {frames}", flush=True)
        sys.exit(65)
    with open(output, "w") as out:
        out.write("".join(joined))
else:
    sys.exit(f"unknown mode {mode}")
