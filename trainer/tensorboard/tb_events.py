"""TensorBoard Text and Scalars without importing torch: tensorboard's own event-file writer.

    log = EventLog(run_dir)              # one events.out.tfevents.* file in run_dir
    log.text("diagnosis", markdown, step=0)     # Text tab, tag "diagnosis"
    log.scalars({"diagnosis/step_ms": 10.4}, step=0)
    log.close()                          # flushes; also a context manager

The one event writer of stepscope: the demonstration trainer (demo/tb_log.py), the trace handler's cycle
worker and the `stepscope tensorboard` watcher all write through it; no torch SummaryWriter. Text is written
under the tag given (one diagnosis tag, "diagnosis", for every writer), not torch's "<tag>/text_summary".
"""

from __future__ import annotations

import time
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData
from tensorboard.summary.writer.event_file_writer import EventFileWriter

TEXT_METADATA = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
    plugin_name="text", content=TextPluginData(version=0).SerializeToString()))


class EventLog:
    def __init__(self, run_dir: Path) -> None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(run_dir), flush_secs=5)

    def _add(self, value: Summary.Value, step: int) -> None:
        self.writer.add_event(Event(wall_time=time.time(), step=int(step), summary=Summary(value=[value])))

    def text(self, tag: str, markdown: str, step: int = 0) -> None:
        tensor = TensorProto(dtype="DT_STRING", string_val=[markdown.encode("utf-8")],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        self._add(Summary.Value(tag=tag, metadata=TEXT_METADATA, tensor=tensor), step)

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, v in values.items():
            self._add(Summary.Value(tag=tag, simple_value=float(v)), step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
