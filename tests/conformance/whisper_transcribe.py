"""A small whisper.cpp program: transcribe a few seconds of synthetic audio with pywhispercpp.

    python tests/conformance/whisper_transcribe.py MODEL --flash-attn on|off [--seconds S] [--threads N] [--audio-ctx N]

It is what a user of pywhispercpp writes, and knows nothing of vizalloc: it loads MODEL
(whisper.cpp's model format), transcribes a sine sweep with a little noise (numpy, fixed
seed), and prints each segment as ``[t0 -> t1] text`` on stdout. whisper.cpp's own log goes
to stderr as usual (pywhispercpp leaves it there). The exit code is 0 when the model loaded
and the transcription ran.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

SAMPLE_RATE = 16000  # WHISPER_SAMPLE_RATE


def sweep(seconds: float) -> np.ndarray:
    """A sine sweep from 200 Hz to 4 kHz with a little white noise, float32 in [-1, 1]."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    f0, f1 = 200.0, 4000.0
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * seconds))
    noise = np.random.default_rng(1).normal(0.0, 0.02, size=t.size)
    return (0.5 * np.sin(phase) + noise).astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--flash-attn", choices=("on", "off"), required=True)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--audio-ctx", type=int, default=0, help="whisper.cpp's audio_ctx (0: the model's)")
    args = p.parse_args(argv)

    from pywhispercpp.model import Model

    model = Model(args.model, context_params={"flash_attn": args.flash_attn == "on", "use_gpu": False},
                  n_threads=args.threads, audio_ctx=args.audio_ctx, print_progress=False, print_realtime=False, language="en")
    for segment in model.transcribe(sweep(args.seconds)):
        print(f"[{segment.t0} -> {segment.t1}] {segment.text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
