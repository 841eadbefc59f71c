"""datatrove's ``NGramsDecontFilter`` on the leakage benchmark corpus (run by bench_leakage.py).

Runs in its own virtual environment (never honestci's; nothing of datatrove is committed)::

    python -m venv /tmp/dt && /tmp/dt/bin/pip install datatrove 'xxhash<4' orjson spacy regex
    /tmp/dt/bin/python bench/datatrove_decont.py --corpus C --eval E --limit-mb 150 --tokenizer spacy

The index. datatrove's ``NGramsDecontIndexer`` reads eval sets from lighteval's task registry, which
needs lighteval and the tasks' datasets from the Hub, so it is not used. Its on-disk format is read
from datatrove's source (``pipeline/decont/n_grams.py``, datatrove 0.10.1): one file
``<task>.index.hashes`` per task, holding the raw uint64 hashes (``np.ndarray.tofile``), and the
filter maps every hash to its task. This script writes that format itself, one "task" per eval
answer (so a match names the answer), with the indexer's own ``compute_hashes`` steps for a label
without a query: ``tokenizer.word_tokenize(simplify_text(answer, config.norm_config))``, word
n-grams by ``datatrove.utils.text.ngrams``, ``" ".join`` and the config's hash function (xxhash64).
The filter then loads the folder with its own ``load_index_hashes``.

The scan. Corpus lines are parsed with orjson into ``datatrove.data.Document`` and passed to
``NGramsDecontFilter.filter`` one by one (what its ``run`` does per document, without the stats
bookkeeping); a document is contaminated when the filter drops it, and the answer it names is the
match. The filter stops at a document's first contaminated n-gram (it removes documents; it does
not measure overlap).

Tokenizers: ``spacy`` is datatrove's default for English (``SpaCyTokenizer("en")`` = ``spacy.blank``,
no model download); ``split`` is ``str.split`` wrapped as a ``WordTokenizer``.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--eval", required=True)
    parser.add_argument("--limit-mb", type=float, default=150)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--tokenizer", choices=["spacy", "split"], default="spacy")
    args = parser.parse_args()

    import numpy as np
    import orjson
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter
    from datatrove.utils.text import ngrams, simplify_text
    from datatrove.utils.word_tokenizers import WordTokenizer

    class SplitTokenizer(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    config = NGramsDecontConfig(n_grams=args.n, find_query_ngrams=False, find_overlap_ngrams=False)
    language = "en" if args.tokenizer == "spacy" else SplitTokenizer()
    rows = [orjson.loads(line) for line in Path(args.eval).read_bytes().splitlines()]
    planted = {r["response_id"] for r in rows if r["planted"]}
    with tempfile.TemporaryDirectory() as index_folder:
        decont = NGramsDecontFilter(index_folder, config=config, language=language)
        started = time.perf_counter()
        for r in rows:  # NGramsDecontIndexer.compute_hashes(label, query=None), one task per answer
            tokens = decont.tokenizer.word_tokenize(simplify_text(r["text"], config.norm_config))
            hashes = [decont.hash_func(" ".join(g)) for g in ngrams(tokens, config.n_grams)]
            np.array(sorted(set(hashes)), dtype=config.hash_config.np_descr).tofile(
                Path(index_folder) / f"{r['response_id']}.index.hashes"
            )
        decont.load_index_hashes()
        index_seconds = time.perf_counter() - started
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        found, contaminated_docs, read, n_docs = set(), 0, 0, 0
        limit = int(args.limit_mb * 1e6) or None
        with open(args.corpus, "rb") as handle:
            for line in handle:
                read += len(line)
                record = orjson.loads(line)
                doc = Document(text=record["text"], id=record["doc_id"])
                n_docs += 1
                if decont.filter(doc) is not True:
                    contaminated_docs += 1
                    found.add(doc.metadata["contaminated_task"])
                if limit and read >= limit:
                    break
        seconds = time.perf_counter() - started
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    print(
        json.dumps(
            {
                "bytes": read,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "docs": n_docs,
                "index_seconds": index_seconds,
                "index_hashes": len(decont._index_hashes),
                "contaminated_docs": contaminated_docs,
                "planted_found": len(found & planted),
                "other_answers_found": len(found - planted),
                "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
