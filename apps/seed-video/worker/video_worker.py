from pathlib import Path

from reactor_runtime.distributed import DistributedWorker
from video_model import ParallelVideoModel, RolloutExhausted, VideoInput, VideoResult


class VideoWorker(DistributedWorker):
    def load(self, weights_root: Path) -> None:
        self.model = ParallelVideoModel(
            weights_root=weights_root,
            device=self.device,
            rank=self.rank,
            world_size=self.world_size,
        )

    def generate(self, input: VideoInput) -> VideoResult:
        return self.model.generate(input)

    def reset(self) -> None:
        self.model.reset()
