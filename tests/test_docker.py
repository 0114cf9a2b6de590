"""The GPU image and the commands of docs/scaling-out.md, checked without Docker or GPUs.

Every `lab` sub-command and option they name must exist (asked of `python -m lab.cli CMD --help`),
every launcher option must exist (`torchrun --help`, `deepspeed --help`), every repository file
they name must exist, and the DeepSpeed configs must parse and leave the Trainer's values on auto.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "docker" / "Dockerfile"
SCALING_OUT = REPO / "docs" / "scaling-out.md"
CONFIGS = sorted((REPO / "recipes" / "deepspeed").glob("*.json"))
TWO_WORD = {"corpora", "tokenizer"}  # command groups: `lab tokenizer train`, `lab corpora list`
SEPARATORS = {"&&", "||", ";", "|", ">", ">>", "2>", "2>&1", "&"}
REPO_PATH = re.compile(r"(?<![\w/.-])((?:recipes|scripts|docker|tests|benchmarks)/[\w./-]*\w)")
AUTO = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
        "gradient_clipping")


def _join_continuations(lines: list[str]) -> list[str]:
    out, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def dockerfile_commands() -> list[str]:
    """Shell commands in the Dockerfile's comments (indented after '#') and its CMD."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    comments = [line[1:].strip() for line in text.splitlines() if line.startswith("#   ")]
    commands = _join_continuations(comments)
    instructions = _join_continuations(text.splitlines())
    for line in instructions:
        if line.startswith(("CMD", "ENTRYPOINT")):
            commands.append(shlex.join(json.loads(line.split(None, 1)[1])))
    return commands


def scaling_out_section() -> str:
    text = SCALING_OUT.read_text(encoding="utf-8")
    match = re.search(r"^## Scaling out\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "docs/scaling-out.md has no '## Scaling out' section"
    return match.group(1)


def readme_commands() -> list[str]:
    """Commands of the bash blocks in the Scaling-out section (comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", scaling_out_section(), re.S)
    lines = [line for block in blocks for line in block.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return _join_continuations(lines)


def lab_invocations(command: str) -> list[tuple[str, list[str]]]:
    """(sub-command, its --options) for every `lab ...`, `-m lab.cli ...` or
    `--module lab.cli ...` in a shell command line."""
    tokens = shlex.split(command)
    found = []
    for i, token in enumerate(tokens):
        if token == "lab.cli" and i > 0 and tokens[i - 1] in ("-m", "--module"):
            start = i + 1
        elif token in ("lab", ".venv/bin/lab"):  # also after `docker run IMAGE`, `srun`, ...
            start = i + 1
        else:
            continue
        rest = []
        for t in tokens[start:]:
            if t in SEPARATORS:
                break
            rest.append(t)
        assert rest, f"`lab` without a sub-command in: {command}"
        words = [] if rest[0].startswith("-") else rest[:2] if rest[0] in TWO_WORD else rest[:1]
        options = [t.split("=", 1)[0] for t in rest[len(words):] if t.startswith("--")]
        found.append((" ".join(words), options))
    return found


def launcher_invocations(command: str) -> list[tuple[str, list[str]]]:
    """(launcher, its own --options) for torchrun and deepspeed: the options before the module."""
    tokens = shlex.split(command)
    found = []
    for i, token in enumerate(tokens):
        if token not in ("torchrun", "deepspeed"):
            continue
        options = []
        for t in tokens[i + 1:]:
            if t in ("-m", "--module") or not t.startswith("-") and "." in t:
                if t == "--module":
                    options.append(t)
                break
            if t.startswith("--"):
                options.append(t.split("=", 1)[0])
        found.append((token, options))
    return found


@functools.lru_cache(maxsize=None)
def lab_help(subcommand: str) -> str:
    env = dict(os.environ, COLUMNS="250", NO_COLOR="1", TERM="dumb")
    proc = subprocess.run([sys.executable, "-m", "lab.cli", *subcommand.split(), "--help"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, f"`lab {subcommand}` is not a lab command:\n{proc.stderr}"
    return proc.stdout


@functools.lru_cache(maxsize=None)
def launcher_help(launcher: str) -> str:
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--help"]
    else:
        pytest.importorskip("deepspeed")
        exe = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or shutil.which("deepspeed")
        if exe is None:
            pytest.skip("the deepspeed launcher is not on PATH")
        cmd = [exe, "--help"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, COLUMNS="250"))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _has_option(help_text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text) is not None


SOURCES = {"Dockerfile": dockerfile_commands, "README": readme_commands}


@pytest.mark.parametrize("source", list(SOURCES))
def test_lab_commands_and_options_exist(source):
    invocations = [inv for cmd in SOURCES[source]() for inv in lab_invocations(cmd)]
    assert any(sub == "pretrain" for sub, _ in invocations), f"{source} names no `lab pretrain`"
    if source == "Dockerfile":
        assert any(sub == "inject" for sub, _ in invocations), "no `lab inject` in the image's usage"
    for subcommand, options in invocations:
        help_text = lab_help(subcommand)
        missing = [o for o in options if not _has_option(help_text, o)]
        assert not missing, f"{source}: `lab {subcommand}` has no {', '.join(missing)}"


@pytest.mark.parametrize("source", list(SOURCES))
def test_launcher_options_exist(source):
    invocations = [inv for cmd in SOURCES[source]() for inv in launcher_invocations(cmd)]
    assert invocations, f"{source} names no torchrun or deepspeed launch"
    for launcher, options in invocations:
        help_text = launcher_help(launcher)
        missing = [o for o in options if not _has_option(help_text, o)]
        assert not missing, f"{source}: `{launcher}` has no {', '.join(missing)}"
        if launcher == "deepspeed":
            assert "--no_local_rank" in options, "lab takes no --local_rank: pass --no_local_rank"


def test_readme_covers_the_launch_modes():
    section = scaling_out_section()
    commands = readme_commands()
    text = "\n".join(commands)
    assert "torchrun --nproc_per_node" in text and "deepspeed --num_gpus" in text
    assert "--rdzv-endpoint" in text and "--hostfile" in text
    assert "#SBATCH" in section and "srun torchrun" in text
    for config in ("zero1.json", "zero2.json", "zero3.json"):
        assert config in section


def test_referenced_files_exist():
    text = DOCKERFILE.read_text(encoding="utf-8") + "\n" + scaling_out_section()
    paths = set(REPO_PATH.findall(text))
    assert "recipes/deepspeed/zero2.json" in paths
    missing = [p for p in sorted(paths) if not (REPO / p).exists()]
    assert not missing, f"named but not in the repository: {missing}"
    # what the image copies from the build context
    for line in _join_continuations(DOCKERFILE.read_text(encoding="utf-8").splitlines()):
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                if not source.startswith("--"):
                    assert (REPO / source).exists(), f"Dockerfile copies missing {source}"


def test_dockerfile_shape():
    text = DOCKERFILE.read_text(encoding="utf-8")
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.M)
    assert base and re.match(r"(nvidia/cuda:\d+\.\d+.*cudnn|pytorch/pytorch:)", base.group(1))
    assert re.search(r"^FROM \$\{BASE_IMAGE\}", text, re.M)
    assert "--no-build-isolation" in text and "deepspeed" in text.lower()
    assert re.search(r"^RUN pip install -e \.", text, re.M)
    assert re.search(r"^CMD \[", text, re.M)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_deepspeed_config(path):
    config = json.loads(path.read_text(encoding="utf-8"))
    stage = int(re.search(r"zero(\d)", path.name).group(1))
    assert config["zero_optimization"]["stage"] == stage
    for key in AUTO:
        assert config[key] == "auto", f"{path.name}: {key} must be 'auto' (the Trainer fills it)"
    assert config["bf16"]["enabled"] == "auto"
    params = config["optimizer"]["params"]
    assert all(params[k] == "auto" for k in ("lr", "betas", "eps", "weight_decay"))
    assert params.get("torch_adam") is True  # no fused-Adam build on CPU or a runtime image
    assert "scheduler" not in config  # --lr-scheduler and --warmup-steps stay in charge
    if stage == 3:
        assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True


def test_deepspeed_configs_validate():
    """DeepSpeed's own ZeRO schema accepts every config (with 'auto' replaced by numbers)."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    assert {p.name for p in CONFIGS} >= {"zero1.json", "zero2.json", "zero3.json"}
    for path in CONFIGS:
        zero = json.loads(path.read_text(encoding="utf-8"))["zero_optimization"]
        zero = {k: (10_000_000 if v == "auto" else v) for k, v in zero.items()}
        DeepSpeedZeroConfig(**zero)


# --- the build context and the image's user -------------------------------------------------------

DOCKERIGNORE = REPO / ".dockerignore"


def _ignore_rules() -> list[tuple[bool, re.Pattern]]:
    """.dockerignore as (is an exception "!", pattern) in order: Docker's rules, where `*` and
    `?` stay within one path segment, `**` spans any number, and the last matching rule wins."""
    rules = []
    for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line[1:] if negated else line
        pattern = pattern.strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((negated, re.compile(regex)))
    return rules


def _ignored(path: str, rules: list[tuple[bool, re.Pattern]]) -> bool:
    """Whether Docker leaves `path` out: a rule matching the path or a folder above it counts."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for negated, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


def build_context() -> dict[str, int]:
    """What `docker build .` would send from this checkout: {path: bytes}. A folder that is left
    out and that no exception rule can reach into is not walked (.venv has GBs)."""
    rules = _ignore_rules()
    exceptions = [regex.pattern for negated, regex in rules if negated]
    sent = {}
    for folder, subfolders, files in os.walk(REPO):
        here = Path(folder).relative_to(REPO).as_posix()
        here = "" if here == "." else here + "/"
        subfolders[:] = [d for d in subfolders
                         if not _ignored(here + d, rules)
                         or any(e.startswith(re.escape(here + d + "/")) for e in exceptions)]
        for name in files:
            if not _ignored(here + name, rules):
                sent[here + name] = (Path(folder) / name).stat().st_size
    return sent


def test_build_context_sends_what_the_image_copies_and_not_the_venv():
    sent = build_context()
    copied = [source for line in _join_continuations(DOCKERFILE.read_text(encoding="utf-8").splitlines())
              if line.startswith("COPY") for source in line.split()[1:-1] if not source.startswith("--")]
    assert "lab" in copied and "pyproject.toml" in copied
    for source in copied:
        if (REPO / source).is_file():
            assert source in sent, f".dockerignore leaves out {source}, which the Dockerfile copies"
        else:
            assert any(p.startswith(source + "/") for p in sent), f".dockerignore leaves out {source}/"
    assert "lab/cli/__init__.py" in sent and "scripts/install_wordnet.sh" in sent
    for left_out in (".venv/", ".git/", "runs/", "results/", "notebooks/", "tests/"):
        assert not any(p.startswith(left_out) for p in sent), f"the context sends {left_out}"
    assert not any("__pycache__" in p or ".egg-info" in p for p in sent)
    assert sum(sent.values()) < 20_000_000, "the build context is over 20 MB"


def test_ignore_rules_follow_docker():
    """The checker itself can fail: a folder rule covers its files, the last rule wins."""
    rules = [(False, re.compile("[^/]*")), (True, re.compile("lab")),
             (False, re.compile("(?:.*/)?__pycache__"))]
    assert _ignored(".venv/lib/x.py", rules) and _ignored("README.md", rules)
    assert not _ignored("lab/cli/__init__.py", rules) and _ignored("lab/cli/__pycache__/data.pyc", rules)


def test_image_runs_as_a_user_and_has_wordnet():
    text = DOCKERFILE.read_text(encoding="utf-8")
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0", "0:0"), "the image runs as root"
    assert text.index("USER") > text.index("RUN pip install -e ."), "installs need root"
    # WordNet for METEOR, which every bundled recipe scores; the same script as scripts/setup.sh
    assert re.search(r"bash scripts/install_wordnet\.sh /opt/venv/bin/python", text)
    assert "bash scripts/install_wordnet.sh" in (REPO / "scripts" / "setup.sh").read_text()
    assert "wordnet" in (REPO / "scripts" / "install_wordnet.sh").read_text().lower()


def _setup_plan(*options: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LAB_TORCH_SPEC", "LAB_TORCH_INDEX_URL")}
    return subprocess.run(["bash", str(REPO / "scripts" / "setup.sh"), *options, "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=60)


def test_setup_on_a_gpu_node_takes_the_cuda_build_and_installs_nothing_in_a_dry_run():
    """`setup.sh --cuda X.Y` installs torch's CUDA X.Y build by its local version (a plain ==2.13.0
    would be met by a CPU build already in .venv) from PyTorch's index, the rest as on CPU; the
    Dockerfile's TORCH_INDEX_URL is the same option; bad options fail in one line."""
    cpu, cuda = _setup_plan(), _setup_plan("--cuda", "12.8")
    assert cpu.returncode == cuda.returncode == 0, cpu.stderr + cuda.stderr
    torch_line = [line for line in cuda.stdout.splitlines() if "torch==" in line]
    assert torch_line == ["pip install --index-url https://download.pytorch.org/whl/cu128 "
                          "torch==2.13.0+cu128"]
    assert "pip install torch==2.13.0" in cpu.stdout.splitlines()
    # everything but torch's line is the CPU plan
    assert ([l for l in cuda.stdout.splitlines() if "torch==" not in l]
            == [l for l in cpu.stdout.splitlines() if "torch==" not in l])
    assert "--index-url https://example.org/whl torch==2.13.0" in _setup_plan(
        "--torch-index-url", "https://example.org/whl").stdout
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    assert "TORCH_INDEX_URL" in dockerfile
    # the image runs `lab study --executor slurm` (submitit) as the docs' cluster page does
    assert re.search(r"pip install -e \.\[slurm\]", dockerfile)
    for bad, says in ((["--cuda", "12"], "--cuda 12: give the CUDA version as X.Y"),
                      (["--cuda"], "give the CUDA version as X.Y"), (["--gpu"], "unknown option --gpu")):
        done = _setup_plan(*bad)
        assert done.returncode == 2 and says in done.stderr and not done.stdout
