"""What a llama.cpp model needs, as a library: settings in, explanations out.

    from vizalloc.predict import Setting, explain_model
    (run,) = explain_model("model.gguf", [Setting(n_ctx=8192, flash_attn="off")], metadata_only=True)
    run.explanation.buffers[0].size      # the CPU compute buffer llama.cpp planned, in bytes

llama.cpp itself creates the context under vizalloc's capture (in a process of its own),
the trace is imported and explained; with ``device="cuda"`` the captured graph is then
replayed through a simulated GPU (:mod:`vizalloc.replay.cuda_split`). The package sits
above the analysis and the capture (it runs one and reads the other) and below the CLI,
which only parses arguments and prints.
"""

from vizalloc.predict.model import (PROGRAMS, ExplainModelError, ModelRun, Setting, explain_model,
                                    outputs_of_program)

__all__ = ["PROGRAMS", "ExplainModelError", "ModelRun", "Setting", "explain_model", "outputs_of_program"]
