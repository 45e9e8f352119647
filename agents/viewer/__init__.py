"""The trajectory viewer: browse eval, RL and distill outputs in a local web page.

``coa view RUN_DIR…`` (see :mod:`coa_cli.view`) serves :func:`create_app` over a
:class:`ViewerData`; ``--export FILE`` writes one self-contained HTML file with
:func:`export_html`. The page and its assets live in ``static/`` beside this file and ship as
package data. Trajectories are read with :mod:`agents.trajectory`, one line at a time through
a line-offset index (:mod:`agents.viewer.index`), so a 100 MB run is never held in memory.

FastAPI is imported only by :func:`create_app` (the ``serve`` extra); indexing and export need
numpy alone, and token text needs ``transformers`` (the ``llm`` extra) when a run has ids.
"""

from agents.viewer.app import create_app
from agents.viewer.export import ExportResult, export_html
from agents.viewer.runs import NotARunError
from agents.viewer.service import EpisodeNotFound, ViewerData

__all__ = ["EpisodeNotFound", "ExportResult", "NotARunError", "ViewerData", "create_app", "export_html"]
