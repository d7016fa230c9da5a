"""The framework's shell around a CUDA C rules file (``pycuda_backend.rules_source``, what pycuda and
the checker's nvcc both compile): a file of rules alone gets the header's include and the kernels'
macro; a file that writes them itself (as every file did before, or for the bounded macro) compiles as
written; a file without one rules' struct to name is refused in one line."""

import dataclasses
import shutil
from pathlib import Path

import pytest
import rally  # noqa: F401  (registers rally/Rally-v0, whose rally.cu holds its rules alone)
from rally.game import RallyParams

from gpu_marl_envs.backends.pycuda_backend import rules_source
from gpu_marl_envs.checker import compile_cuda
from gpu_marl_envs.registration import game_spec

RALLY = game_spec("rally/Rally-v0")
RULES = RALLY.kernels.cuda.read_text()


def _old_style(tmp_path: Path) -> Path:
    """Rally's rules with their include and macro written, as a .cu file was before the framework added them."""
    path = tmp_path / "rally.cu"
    path.write_text(f'#include "multi_agent.cuh"\n{RULES}\nGME_MULTI_AGENT_KERNELS(Rally)\n')
    return path


def test_a_file_of_rules_alone_gets_the_include_and_the_macro(tmp_path):
    source = rules_source(RALLY.kernels.cuda, multi_agent=True)
    assert source.startswith(f'#include "multi_agent.cuh"\n#line 1 "rally.cu"\n{RULES}')
    assert source.endswith("\nGME_MULTI_AGENT_KERNELS(Rally)\n")
    # A single-agent env's; the macro named in a comment is not the file's own.
    env = tmp_path / "puck.cu"
    env.write_text("// GME_CLASSIC_KERNELS(Puck) comes from the framework\nstruct Puck : GmeEnv {};\n")
    source = rules_source(env, multi_agent=False)
    assert source.startswith('#include "classic.cuh"\n') and source.endswith("\nGME_CLASSIC_KERNELS(Puck)\n")


def test_a_file_that_writes_its_include_and_macro_compiles_as_written(tmp_path):
    old = _old_style(tmp_path)
    assert rules_source(old, multi_agent=True) == f'#line 1 "rally.cu"\n{old.read_text()}'
    # The bounded macro: the framework adds nothing to TagContinuous's file.
    bounded = game_spec("gpu_marl_envs/TagContinuous-v0").kernels.cuda
    assert "GME_MULTI_AGENT_KERNELS_BOUNDED(TagContinuous" in bounded.read_text()
    assert rules_source(bounded, multi_agent=True) == f'#line 1 "tag_continuous.cu"\n{bounded.read_text()}'


@pytest.mark.parametrize(
    "rules, found", [("struct Rally {};\n", "none"), ("struct A : GmeGame {};\nstruct B : GmeGame {};\n", "2 (A, B)")]
)
def test_a_file_without_one_rules_struct_is_refused_in_one_line(tmp_path, rules, found):
    path = tmp_path / "mine.cu"
    path.write_text(rules)
    with pytest.raises(ValueError) as refused:
        rules_source(path, multi_agent=True)
    message = str(refused.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert f"this file has {found}: end it with GME_MULTI_AGENT_KERNELS(YourRules)" in message


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
def test_old_and_new_files_compile_to_the_same_kernels(tmp_path):
    old = dataclasses.replace(RALLY, kernels=dataclasses.replace(RALLY.kernels, cuda=_old_style(tmp_path)))
    params = RallyParams()
    assert compile_cuda(old, params) == compile_cuda(RALLY, params)
