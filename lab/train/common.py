"""Training plumbing shared by pre-training and fine-tuning (both run on the HF Trainer)."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

from lab import progress
from lab.common import LabError, files_problem, files_record, safetensors_complete
from lab.models import MEMBERSHIP_FIELDS, MEMBERSHIP_HASH, membership_hashes  # noqa: F401


def state_sha256(model: Any) -> str:
    """Hash of all weights (names, shapes and values) in a fixed order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().float().numpy().tobytes())
    return digest.hexdigest()


def trained_weights_sha256(model: Any) -> str:
    """state_sha256 of a model after training. Under DeepSpeed ZeRO-3 each rank holds only a
    partition of every weight, so all ranks gather the full weights first (a collective: every
    rank must call this)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
            return state_sha256(model)
    return state_sha256(model)


CHECKPOINT_RECORD = "lab_checkpoint.json"
LOGGING_RECORD = "lab_logging.json"  # a checkpoint's loss window since the last log


def read_logging_window(checkpoint: Path) -> dict[str, Any] | None:
    """A checkpoint's LOGGING_RECORD, None if it has none (saved before the lab wrote it: a
    resumed run then logs its first window over the resumed steps only)."""
    try:
        window = json.loads((checkpoint / LOGGING_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fields = {"pending_loss": float, "last_logged_step": int, "logged_loss_sum": float}
    if not isinstance(window, dict) or not all(
            isinstance(window.get(k), (int, float)) for k in fields):
        return None
    return {k: cast(window[k]) for k, cast in fields.items()}


def record_checkpoint(checkpoint: Path) -> None:
    """Write CHECKPOINT_RECORD (every file's size and sha256) into a saved checkpoint, last and
    atomically: a checkpoint without it, or whose files differ from it, is incomplete."""
    files = {name: entry for name, entry in files_record(checkpoint).items()
             if name != CHECKPOINT_RECORD}
    tmp = checkpoint / (CHECKPOINT_RECORD + ".tmp")
    tmp.write_text(json.dumps({"files": files}, indent=1), encoding="utf-8")
    os.replace(tmp, checkpoint / CHECKPOINT_RECORD)
    step = checkpoint.name.removesuffix(".tmp").removeprefix("checkpoint-")
    if step.isdigit():  # the run's own record of this step's weights (CHECKPOINT_WEIGHTS)
        weights = {name: entry for name, entry in files.items() if name.endswith(".safetensors")}
        record = checkpoint.parent / CHECKPOINT_WEIGHTS_FILE
        recorded = read_checkpoint_weights(checkpoint.parent)
        recorded[str(int(step))] = weights
        tmp = record.with_name(record.name + ".tmp")
        tmp.write_text(json.dumps(recorded, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, record)


# A run's record of every checkpoint's weights ({step: files_record of its *.safetensors}),
# written beside the checkpoints as each is saved and copied into the run's manifest under
# CHECKPOINT_WEIGHTS: `--init-from RUN/checkpoints/checkpoint-N` is read only if its weights are
# the ones this run saved at step N (lab.train.artefacts.read_checkpoint), not another run's
# checkpoint put in its folder.
CHECKPOINT_WEIGHTS = "checkpoint_weights"
CHECKPOINT_WEIGHTS_FILE = "lab_checkpoint_weights.json"


def read_checkpoint_weights(checkpoints: Path) -> dict[str, Any]:
    """The CHECKPOINT_WEIGHTS_FILE of a run's checkpoints folder ({} before its first save)."""
    try:
        recorded = json.loads((Path(checkpoints) / CHECKPOINT_WEIGHTS_FILE).read_text(
            encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def checkpoint_problem(checkpoint: Path) -> str | None:
    """None if a checkpoint is complete, else why not.

    With CHECKPOINT_RECORD (written last by CheckpointRecorder), every listed file must exist
    with its recorded size and sha256. Checkpoints saved before the lab wrote that record are
    accepted when the standard files are there and whole: trainer_state.json, the weights
    (model.safetensors, its header consistent with its size, or pytorch_model.bin), and
    optimizer.pt and scheduler.pt as complete zip archives (DeepSpeed keeps its optimizer in a
    global_step* folder instead)."""
    record_path = checkpoint / CHECKPOINT_RECORD
    if record_path.is_file():
        try:
            files = json.loads(record_path.read_text(encoding="utf-8"))["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return f"{CHECKPOINT_RECORD} unreadable"
        return files_problem(checkpoint, files)
    import zipfile

    required = ["trainer_state.json"]
    if not any(checkpoint.glob("global_step*")):
        required += ["optimizer.pt", "scheduler.pt"]
    for name in required:
        path = checkpoint / name
        if not path.is_file() or path.stat().st_size == 0:
            return f"{name} missing or empty"
        if name.endswith(".pt") and not zipfile.is_zipfile(path):
            return f"{name} truncated"
    try:
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "trainer_state.json truncated"
    weights = sorted(checkpoint.glob("*.safetensors"))  # model.safetensors, or its shards
    for path in weights:
        if not safetensors_complete(path):
            return f"{path.name} truncated"
    if not weights and not any(p.stat().st_size for p in checkpoint.glob("pytorch_model*.bin")):
        return "no model weights"
    return None


def checkpoints_newest_first(folder: Path) -> list[Path]:
    found = [p for p in Path(folder).glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]), reverse=True)


def latest_checkpoint(folder: Path) -> Path | None:
    """Newest complete checkpoint (see checkpoint_problem), or None."""
    for checkpoint in checkpoints_newest_first(folder):
        if checkpoint_problem(checkpoint) is None:
            return checkpoint
    return None


def non_finite_error(what: str, step: int, value: Any) -> LabError:
    return LabError(f"training stopped: non-finite {what} ({value}) at step {step} "
                    "(diverged; lower --lr?)")


class NonFiniteWatch:
    """Stops training with a LabError naming the first step whose loss was not finite. On a GPU
    the check stays on the device (reading the loss every step would make the host wait for the
    GPU each step, with no batch prepared and no kernel queued meanwhile) and is read at the next
    log, checkpoint or the end (check); on a CPU it is read at once."""

    def __init__(self) -> None:
        self.first_bad_step: Any = None

    def see(self, loss: Any, step: int) -> None:
        import torch

        value = torch.as_tensor(loss).detach()
        if value.is_cuda:
            bad = ~torch.isfinite(value).all()
            if self.first_bad_step is None:
                self.first_bad_step = torch.zeros((), dtype=torch.long, device=value.device)
            self.first_bad_step = torch.where(bad & (self.first_bad_step == 0), step,
                                              self.first_bad_step)
        elif not bool(torch.isfinite(value).all()):
            raise non_finite_error("loss", step, value.float().flatten()[0].item())

    def device_flag(self) -> Any:
        """The first bad step so far (0: none), without reading it."""
        return 0 if self.first_bad_step is None else self.first_bad_step

    def check(self) -> None:
        if self.first_bad_step is not None and int(self.first_bad_step):
            raise non_finite_error("loss", int(self.first_bad_step), "nan/inf")


def weights_are_finite(model: Any) -> bool:
    import torch

    return all(bool(torch.isfinite(p.detach()).all()) for p in model.parameters()
               if p.numel() > 0 and p.is_floating_point())


REPORT_TARGETS = ("tensorboard", "wandb", "mlflow")
TENSORBOARD_DIR = "tensorboard"  # in a trained model's folder: its TensorBoard event files
# Logged beside loss, learning rate and grad norm; timing, so never part of a manifest's history.
THROUGHPUT_KEYS = ("throughput_samples_per_second", "throughput_tokens_per_second")


def report_to_param() -> Any:
    from lab.common import param

    return param("tensorboard", "Where training logs go (loss, learning rate, grad norm, "
                                "throughput): " + ", ".join(REPORT_TARGETS) + ", a comma-separated "
                                "list of them, or none. TensorBoard event files land in "
                                f"OUT/{TENSORBOARD_DIR}.")


def report_targets(report_to: str) -> list[str]:
    """The Trainer's report_to list for `report_to`; a LabError names an unknown target."""
    targets = [t.strip() for t in str(report_to).split(",") if t.strip()]
    if targets == ["none"] or not targets:
        return []
    unknown = [t for t in targets if t not in REPORT_TARGETS]
    if unknown:
        raise LabError(f"--report-to {report_to}: unknown target {unknown[0]!r} (use "
                       + ", ".join(REPORT_TARGETS) + " or none)")
    import importlib.util

    missing = [t for t in targets if importlib.util.find_spec(t) is None]
    if missing:  # the Trainer would fail only after the data and model are built
        raise LabError(f"--report-to {report_to}: the {missing[0]} package is not installed "
                       f"(pip install {missing[0]})")
    return targets


def history_without_timing(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Trainer log history without the throughput entries (timing is not reproducible)."""
    return [{k: v for k, v in entry.items() if k not in THROUGHPUT_KEYS} for entry in history]


def show_training_log(logs: dict[str, Any], bar: Any = None) -> None:
    """One training log, never on stdout, which holds a command's result (its summary line):
    given the step bar (on a terminal), its loss goes on the bar; else (a log file, a stage's
    log, CI) a line on stderr, as the Trainer prints it, floats to 4 digits
    (benchmarks/gpu_check.py reads the throughput back from these lines)."""
    if bar is not None:
        if "loss" in logs:
            bar.set_postfix_str(f"loss {float(logs['loss']):.4g}", refresh=False)
        return
    print({k: f"{v:.4g}" if isinstance(v, float) else v for k, v in logs.items()},
          file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet_training(deepspeed_config: Any) -> Iterator[None]:
    """Two library habits that print a warning in every training stage, neither about the run:
    - accelerate, wherever DeepSpeed is installed, imports it to unwrap every model the Trainer
      touches or transformers saves, configured or not; the import takes seconds and logs
      "Setting accelerator to CPU". Without a DeepSpeed config, accelerate is told DeepSpeed is
      absent.
    - EncoderDecoderModel warns on every forward pass given labels that "decoder_input_ids ...
      no need to pass them yourself", even when labels are all it is given (the current way,
      which the lab's collators use)."""
    import accelerate.utils.other as accelerate_other

    hide = deepspeed_config is None and hasattr(accelerate_other, "is_deepspeed_available")
    saved = getattr(accelerate_other, "is_deepspeed_available", None)
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", category=FutureWarning,
            message=r"Version v4\.12\.0 introduces a better way to train encoder-decoder")
        if hide:
            accelerate_other.is_deepspeed_available = lambda: False
        try:
            yield
        finally:
            if hide:
                accelerate_other.is_deepspeed_available = saved


def make_guarded_trainer_class():
    """HF Trainer that stops with a LabError (one line, naming the step) on a non-finite loss,
    and writes CHECKPOINT_RECORD into every checkpoint it saves (refusing to save non-finite
    weights). Shared by pre-training and fine-tuning."""
    from transformers import PrinterCallback, ProgressCallback, Trainer, TrainerCallback
    from transformers.integrations import TensorBoardCallback

    class FolderTensorBoard(TensorBoardCallback):
        """Writes to a folder of the lab's choosing (transformers 4 took it from
        TrainingArguments.logging_dir, 5 from an environment variable)."""

        def __init__(self, folder: Path):
            super().__init__()
            self.folder = folder

        def _init_summary_writer(self, args, *_args, **_kwargs):
            self.tb_writer = self._SummaryWriter(log_dir=str(self.folder))

    # The Trainer's own two print each log as a dict on stdout (tqdm.write's default stream).
    class LogLines(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_local_process_zero and logs:
                show_training_log({k: v for k, v in logs.items() if k != "total_flos"})

    class BarWithLoss(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and self.training_bar is not None and logs:
                show_training_log(logs, self.training_bar)

    class CheckpointRecorder(TrainerCallback):
        def on_save(self, args, state, control, model=None, **kwargs):
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if args.should_save and checkpoint.is_dir():
                record_checkpoint(checkpoint)

    class GuardedTrainer(Trainer):
        def __init__(self, *a, tensorboard_dir: Path | None = None,
                     tokens_per_sample: int | None = None, **kw):
            """tokens_per_sample: where every training sample has that many tokens (a
            pre-training block), the throughput is also logged in tokens per second."""
            super().__init__(*a, **kw)
            self.tokens_per_sample = tokens_per_sample
            self.add_callback(CheckpointRecorder())
            if self.pop_callback(PrinterCallback) is not None:
                self.add_callback(LogLines())
            if self.pop_callback(ProgressCallback) is not None:
                self.add_callback(BarWithLoss())
            self._last_log: tuple[float, int] | None = None
            self._watch = NonFiniteWatch()
            if "tensorboard" in self.args.report_to:
                if tensorboard_dir is None:
                    raise ValueError("report_to tensorboard needs a tensorboard_dir")
                self.remove_callback(TensorBoardCallback)
                self.add_callback(FolderTensorBoard(Path(tensorboard_dir)))

        def log(self, logs, *args, **kwargs):
            """Adds the throughput since the previous log to each training-loss log."""
            import time

            self._stop_if_a_loss_was_not_finite()

            now, step = time.perf_counter(), self.state.global_step
            if "loss" in logs and self._last_log is not None and step > self._last_log[1]:
                seconds = now - self._last_log[0]
                samples = (step - self._last_log[1]) * self.args.per_device_train_batch_size \
                    * self.args.gradient_accumulation_steps * self.args.world_size
                logs["throughput_samples_per_second"] = round(samples / seconds, 3)
                if self.tokens_per_sample:
                    logs["throughput_tokens_per_second"] = round(
                        samples * self.tokens_per_sample / seconds, 1)
            if "loss" in logs or self._last_log is None:
                self._last_log = (now, step)
            return super().log(logs, *args, **kwargs)

        def training_step(self, model, inputs, *args, **kwargs):
            if self._resumed_window is not None and hasattr(self, "_tr_loss"):
                # transformers 5: added before the step's own loss, in the uninterrupted order
                self._restore_logging_window(self._tr_loss)
            loss = super().training_step(model, inputs, *args, **kwargs)
            # global_step counts finished optimizer steps: this one is the next.
            self._watch.see(loss, self.state.global_step + 1)
            return loss

        def _stop_if_a_loss_was_not_finite(self) -> None:
            self._watch.check()

        def _issue_warnings_after_load(self, load_result):
            """transformers 5 reports RoBERTa's MLM decoder, which shares the word embeddings'
            storage, as missing from every checkpoint it resumes, though loading the embeddings
            restores it (tests/test_integrity.py resumes to the same weights): only missing keys
            that share no storage with a loaded weight are reported."""
            missing = set(load_result.missing_keys)
            if missing:
                state = self.model.state_dict()
                loaded = {tensor.data_ptr() for key, tensor in state.items() if key not in missing}
                load_result = load_result._replace(missing_keys=[
                    key for key in load_result.missing_keys
                    if key not in state or state[key].data_ptr() not in loaded])
            return super()._issue_warnings_after_load(load_result)

        def _save_checkpoint(self, model, *args, **kwargs):
            self._stop_if_a_loss_was_not_finite()
            if not weights_are_finite(self.model):
                raise non_finite_error("weights", self.state.global_step, "nan/inf")
            result = super()._save_checkpoint(model, *args, **kwargs)
            self._save_logging_window()
            return result

        # A checkpoint saved between two logs holds the loss summed since the last one, which
        # the Trainer keeps outside its state: a resumed run would log its next window over the
        # steps after the checkpoint only (and its training loss over the resumed part). The
        # window goes into the checkpoint (LOGGING_RECORD) and back into the Trainer on resume,
        # so the resumed run logs what an uninterrupted one does.
        _window_loss: Any = None  # the Trainer's running loss tensor, seen at every step's end
        _resumed_window: dict[str, Any] | None = None

        def train(self, resume_from_checkpoint=None, *args, **kwargs):
            self._resumed_window = (read_logging_window(Path(resume_from_checkpoint))
                                    if isinstance(resume_from_checkpoint, (str, Path)) else None)
            result = super().train(resume_from_checkpoint, *args, **kwargs)
            self._stop_if_a_loss_was_not_finite()
            return result

        def _restore_logging_window(self, tr_loss: Any) -> None:
            window, self._resumed_window = self._resumed_window, None
            tr_loss += window["pending_loss"]
            self._globalstep_last_logged = window["last_logged_step"]
            self._total_loss_scalar = window["logged_loss_sum"]

        def _maybe_log_save_evaluate(self, tr_loss, *args, **kwargs):
            if self._resumed_window is not None:  # transformers 4 (its running loss is local)
                self._restore_logging_window(tr_loss)
            self._window_loss = tr_loss
            return super()._maybe_log_save_evaluate(tr_loss, *args, **kwargs)

        def _save_logging_window(self) -> None:
            if self._window_loss is None:
                return
            from transformers.trainer_pt_utils import nested_gather

            pending = nested_gather(self._window_loss.detach(), self.args.parallel_mode)
            window = {"pending_loss": pending.float().mean().item(),
                      "last_logged_step": self._globalstep_last_logged,
                      "logged_loss_sum": self._total_loss_scalar}
            checkpoint = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            if self.args.should_save and checkpoint.is_dir():
                (checkpoint / LOGGING_RECORD).write_text(json.dumps(window), encoding="utf-8")

        def mean_training_loss(self) -> float | None:
            """The training loss averaged over every step of the run, resumed or not (the
            Trainer's own averages over the steps of its last train() call)."""
            steps = self.state.global_step
            return self._total_loss_scalar / steps if steps else None

    return GuardedTrainer


# bf16 autocast on hardware without bfloat16 instructions is emulated: the Trainer pre-trained the
# quickstart's GPT-2 at 111 useful tokens/s in bf16 against 2,913 in float32 on an AVX2-only CPU
# (benchmarks/cpu_precision.py, bare steps: 110 vs 2,577); with them bf16 is 1.47x faster.
BF16_EMULATED_SLOWDOWN = 26


def bf16_is_native() -> bool:
    """Whether this machine computes in bfloat16 natively: a CUDA GPU that supports it, an x86 CPU
    with AVX-512 BF16 or AMX, another CPU whose oneDNN build reports bf16 support. True when
    PyTorch cannot tell (these probes are not public API): only a known slowdown is reported."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    if platform.machine().lower() in ("x86_64", "amd64"):
        probes = [getattr(torch.cpu, name, None)
                  for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    else:
        probes = [getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)]
    probes = [probe for probe in probes if probe is not None]
    try:
        return not probes or any(bool(probe()) for probe in probes)
    except RuntimeError:
        return True


def slow_bf16(fields: str) -> str:
    """The warning for bf16 asked of a machine without bfloat16 instructions."""
    import torch

    return (f"{fields}: this CPU ({torch.backends.cpu.get_cpu_capability()}) has no bfloat16 "
            f"instructions, so bf16 autocast is emulated, about {BF16_EMULATED_SLOWDOWN}x slower "
            "than float32 here; turn it off unless the numbers must match a bf16 run")


def training_arguments(output_dir: Path, **settings: Any):
    """TrainingArguments with the lab's defaults; settings this transformers version does not
    know are dropped (the lab supports 4.44 to 5.x)."""
    import torch
    from transformers import TrainingArguments

    wanted: dict[str, Any] = dict(
        report_to=[], use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0,
        remove_unused_columns=False, logging_first_step=True,
        # the Trainer's step bar on a terminal; none in logs and CI (lab.progress decides)
        disable_tqdm=not progress.showing(),
        save_total_limit=2,
        # Both families use every weight in every step: skip DDP's per-step unused-weight search.
        ddp_find_unused_parameters=False,
        # Log a non-finite loss as it is (the default replaces it by the mean of the finite
        # ones, hiding a diverged run); the guarded trainer stops on it anyway.
        logging_nan_inf_filter=False,
    )
    wanted.update(settings)
    wanted["output_dir"] = str(output_dir)
    if wanted.get("bf16") and not bf16_is_native():
        print(f"lab: warning: {slow_bf16('bf16')}", file=sys.stderr, flush=True)
    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    return TrainingArguments(**{k: v for k, v in wanted.items() if k in known})


STALE_BUILD_LOCK_S = 15 * 60  # a DeepSpeed op build takes about a minute on two cores


def warn_of_stale_build_locks(now: float | None = None) -> list[Path]:
    """Names each lock file in torch's extensions folder older than STALE_BUILD_LOCK_S.

    DeepSpeed builds its ops (on CPU, the shared-memory comm op) there on a first run, behind a
    lock file; a build killed midway leaves the lock, and every later run waits on it forever
    without a word. Deleting it is the user's call: a build may be running in another process."""
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    now = time.time() if now is None else now
    stale = sorted(lock for pattern in ("*/lock", "*/*/lock") for lock in root.glob(pattern)
                   if now - lock.stat().st_mtime > STALE_BUILD_LOCK_S)
    for lock in stale:
        minutes = (now - lock.stat().st_mtime) / 60
        print(f"lab: warning: {lock} is {minutes:.0f} min old: a DeepSpeed op build killed midway "
              "leaves it, and this run will wait on it; delete it if no build is running",
              file=sys.stderr, flush=True)
    return stale

