"""The seed page's ``VideoWorker`` (``video_worker.py``, unchanged) with session snapshots.

``snapshot()`` / ``restore()`` are the worker's side of docs/snapshots.md, in PyTorch's
``state_dict()`` / ``load_state_dict()`` shape: the rollout's chunk counter and motion state,
which every rank holds whole (so rank 0's answer is the runner's snapshot, and every rank
restores the same one).
"""
from video_worker import VideoWorker


class SnapshotVideoWorker(VideoWorker):
    def snapshot(self) -> dict:
        return self.model.state_dict()

    def restore(self, snapshot: dict) -> None:
        self.model.load_state_dict(snapshot)
