"""``coa retriever``: build passage indexes, query them, and serve them over HTTP.

``build-index`` writes a bm25 or dense index for a jsonl corpus (``{"id","contents"}``);
``serve`` answers the Search-R1 ``POST /retrieve`` API from such an index (building it
first when the directory does not exist yet: ``coa retriever serve --corpus wiki.jsonl
--backend bm25`` is enough, the index then lives in the cache and is reused next time);
``search`` prints the top passages of one query, to check an index by eye.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import typer

__all__ = ["app", "default_index_dir"]

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Build, query and serve wiki passage indexes (bm25 / dense)."
)

_BACKEND_HELP = "bm25 (bm25s) or dense (sentence-transformers + faiss)."


def _check_backend(backend: str) -> None:
    if backend not in ("bm25", "dense"):
        raise typer.BadParameter("use bm25 or dense (remote is a client, not an index)", param_hint="--backend")


def _build(
    backend: str, corpus: Path, index: Path, model: str | None, overwrite: bool, torch_threads: int | None = None
) -> None:
    from coa_envs.retrieval import build_index

    options: dict[str, object] = {"model": model} if backend == "dense" and model else {}
    if backend == "dense" and torch_threads:
        options["torch_threads"] = torch_threads
    build_index(backend, corpus, index, overwrite=overwrite, **options)


def default_index_dir(corpus: Path, backend: str) -> Path:
    """Where ``serve --corpus`` keeps an index when no ``--index`` is given (one per corpus file)."""
    root = Path(os.environ.get("COA_CACHE_DIR") or Path.home() / ".cache" / "coa_envs") / "indexes"
    digest = hashlib.sha256(str(corpus.resolve()).encode()).hexdigest()[:10]
    return root / f"{corpus.stem}-{digest}-{backend}"


@app.command("build-index")
def build_index_command(
    corpus: Path = typer.Option(..., exists=True, dir_okay=False, help="jsonl corpus, one {id, contents} per line."),
    index: Path = typer.Option(..., help="Directory to write the index to."),
    backend: str = typer.Option("bm25", help=_BACKEND_HELP),
    model: str | None = typer.Option(None, help="dense only: HF model id/path (default: bundled MiniLM)."),
    overwrite: bool = typer.Option(False, help="Replace an existing index."),
    torch_threads: int | None = typer.Option(None, help="dense only: torch threads for embedding."),
) -> None:
    """Index CORPUS once; the index is memory-mapped when loaded."""
    _check_backend(backend)
    try:
        _build(backend, corpus, index, model, overwrite, torch_threads)
    except FileExistsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--index") from None
    typer.echo(f"{backend} index written to {index}")


@app.command("search")
def search_command(
    query: str = typer.Argument(..., help="The query text."),
    index: Path = typer.Option(..., help="Index directory."),
    backend: str = typer.Option("bm25", help=_BACKEND_HELP),
    top_k: int = typer.Option(3, help="Passages to show."),
) -> None:
    """Print the top passages for QUERY, as the wiki_search tool renders them."""
    from coa_envs.retrieval import RetrievalIndexError, open_retriever
    from coa_envs.tools.wiki_search import render_hits

    _check_backend(backend)
    try:
        hits = open_retriever(backend, index=str(index)).search([query], k=top_k)[0]
    except RetrievalIndexError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    typer.echo(render_hits(hits, 2000) if hits else "(no passage matched)")


@app.command("serve")
def serve_command(
    index: Path | None = typer.Option(
        None, help="Index directory (built from --corpus if missing; default: a cache dir per corpus)."
    ),
    corpus: Path | None = typer.Option(None, dir_okay=False, help="jsonl corpus (needed to build; or if it moved)."),
    backend: str = typer.Option("bm25", help=_BACKEND_HELP),
    model: str | None = typer.Option(None, help="dense only: HF model id/path used when building."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (keep 127.0.0.1 unless you mean it)."),
    port: int = typer.Option(8000, help="TCP port."),
    max_batch_queries: int = typer.Option(256, help="Most queries answered by one batched search."),
    torch_threads: int | None = typer.Option(
        None, help="dense only: torch threads (1 is fastest for single queries on a small or busy CPU)."
    ),
) -> None:
    """Serve POST /retrieve {"queries", "topk", "return_scores"} (the Search-R1 API) until Ctrl-C."""
    from coa_envs.retrieval import RetrievalIndexError, open_retriever
    from coa_envs.retrieval.server import run_server

    _check_backend(backend)
    if index is None:
        if corpus is None:
            raise typer.BadParameter(
                "give --index, or --corpus to build (or reuse) a cached index", param_hint="--index"
            )
        index = default_index_dir(corpus, backend)
    if not index.exists():
        if corpus is None:
            raise typer.BadParameter(f"{index} does not exist; pass --corpus to build it", param_hint="--index")
        typer.echo(f"building the {backend} index of {corpus} at {index} ...")
        _build(backend, corpus, index, model, overwrite=False, torch_threads=torch_threads)
    try:
        options = {"torch_threads": torch_threads} if backend == "dense" and torch_threads else {}
        retriever = open_retriever(backend, index=str(index), corpus=str(corpus) if corpus else None, **options)
    except RetrievalIndexError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"serving {backend} index {index} ({getattr(retriever, 'num_docs', '?')} passages) "
        f"on http://{host}:{port}/retrieve"
    )
    run_server(retriever, host=host, port=port, max_batch_queries=max_batch_queries)
