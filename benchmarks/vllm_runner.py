"""Runs inside vLLM CPU's own virtualenv, driven by bench_cpu.py over stdin/stdout.

Protocol: one JSON object per line, prefixed by "@@" (vLLM logs to stdout too). Start: argv = MODEL_DIR DTYPE CORPUS N MAX_LEN. Then for each
line "run" on stdin, it embeds the corpus once and answers {"seconds": s, "first": [...]}; "quit" ends.
"""

import json
import os
import sys
import time

os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def main() -> None:
    model, dtype, corpus, n, max_len = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    from vllm import LLM

    with open(corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(n), f)]
    llm = LLM(model=model, runner="pooling", dtype=dtype, max_model_len=max_len, enforce_eager=True,
              gpu_memory_utilization=0.5)
    truncate = {"tokenization_kwargs": {"truncation": True, "max_length": max_len}}
    llm.embed(texts[:32], **truncate, use_tqdm=False)
    print("@@" + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        start = time.perf_counter()
        outputs = llm.embed(texts, **truncate, use_tqdm=False)
        seconds = time.perf_counter() - start
        vectors = [o.outputs.embedding for o in outputs]
        print("@@" + json.dumps({"seconds": seconds, "embeddings": vectors}), flush=True)


if __name__ == "__main__":
    main()
