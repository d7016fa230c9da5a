"""Calibration of the COVID-19 and economy simulation (``covid_economy.py``): fitted parameters,
reward normalisers, populations and the real-world daily series the simulation starts from.

The numbers are those of the AI Economist (Trott et al., 2021; salesforce/ai-economist, BSD-3-Clause
(c) 2020 Salesforce.com, Inc.), whose upstream sources are the Oxford COVID-19 Government Response
Tracker (CC BY 4.0), JHU CSSE and Our World in Data (CC BY 4.0) and US BLS / Census (public domain).
Its authors present the simulation as a proof of concept, not a tool for real-world policy.

Three ways in:
- :func:`default_calibration` — the copy shipped in the package (``gpu_marl_envs/data/``), so the env
  runs with no download;
- :func:`load_ai_economist` — the AI Economist's calibration folder (``model_constants.json``,
  ``fitted_params.json``, ``real_world_data.npz``), e.g. one refitted with its notebooks;
- :func:`load` — a file written by :func:`save`.

The shipped file is built from the AI Economist folder by this module's command line::

    python -m gpu_marl_envs.envs.covid_calibration build /path/to/data_and_fitted_params

(``--out`` names another file). ``tests/test_covid_calibration.py`` checks that the shipped file
equals what the loader derives from the folder.

Agent order: arrays with one entry per agent (``health_weight``, the normalisers) hold the 51
governors (US states and DC, alphabetical, DC at index 8) and then the planner, at index 51.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

import numpy as np

SHIPPED_FILE = "covid19_calibration.npz"
"""The shipped calibration, under the package's ``data/`` folder."""

DATE_FORMAT = "%Y-%m-%d"

# The AI Economist's folder format: file names, and the key of each fitted array.
MODEL_CONSTANTS_FILE = "model_constants.json"
FITTED_PARAMS_FILE = "fitted_params.json"
REAL_WORLD_DATA_FILE = "real_world_data.npz"


@dataclass(frozen=True, eq=False)  # eq=False: compared and hashed by identity (it holds arrays)
class CovidCalibration:
    """Everything the simulation takes from data. Arrays are read-only numpy arrays; ``S = 51``
    states, ``D`` days of data from ``data_start_date``."""

    state_names: tuple[str, ...]
    """``S`` names, alphabetical (District of Columbia at index 8)."""
    population: np.ndarray
    """(S,) int64: state populations (Census 2019)."""
    us_population: int
    gdp_per_capita: float
    """$ per person-year (2019)."""
    num_stringency_levels: int
    """Stringency levels ``1 .. num_stringency_levels`` (the governors' actions ``1 ..``)."""
    mortality: float
    """``mu``: deaths = mu * (recovered - vaccinated)."""
    recovery_rate: float
    """``gamma``: the daily I -> R rate."""
    value_of_life: float
    """$ per death in the health index."""
    beta_delay: int
    """``d``: days between a stringency level and the infection rate it sets."""
    beta_intercepts: np.ndarray
    """(S,) float64: ``beta0``."""
    beta_slopes: np.ndarray
    """(S,) float64: ``beta1`` (negative: stringency lowers the infection rate)."""
    filter_length: int
    """Days of stringency changes the unemployment filters see (600)."""
    filter_lambdas: np.ndarray
    """(K,) float64: decay lengths of the K exponential unemployment filters, in days."""
    filter_weights: np.ndarray
    """(S, K) float64: each state's weight on each filter."""
    unemployment_bias: np.ndarray
    """(S,) float64: baseline unemployment rate, percent."""
    health_weight: np.ndarray
    """(S + 1,) float64: the fitted health weight alpha0 of each governor, then the planner's."""
    min_health: np.ndarray
    """(S + 1,) float64: reward normalisers, governors then the planner (mean daily raw health index
    with every state fully open)."""
    max_health: np.ndarray
    """(S + 1,) float64: ... with every state fully closed."""
    min_economic: np.ndarray
    """(S + 1,) float64: mean daily raw economic index, fully closed."""
    max_economic: np.ndarray
    """(S + 1,) float64: ... fully open."""
    data_start_date: str
    """Date of day 0 of the series (``YYYY-MM-DD``)."""
    policy: np.ndarray
    """(D, S) int8: real-world stringency level of each day."""
    subsidy: np.ndarray
    """(D,) float64: real-world federal direct payments, $, on the day each was paid (else 0)."""
    susceptible: np.ndarray
    """(D, S) float64 (NaN where the data has no value)."""
    infected: np.ndarray
    """(D, S) float64."""
    recovered: np.ndarray
    """(D, S) float64."""
    unemployed: np.ndarray
    """(D, S) float64: unemployed persons."""

    def __post_init__(self):
        s = len(self.state_names)
        k = len(self.filter_lambdas)
        days = len(self.policy)
        shapes = {
            "population": (s,),
            "beta_intercepts": (s,),
            "beta_slopes": (s,),
            "filter_lambdas": (k,),
            "filter_weights": (s, k),
            "unemployment_bias": (s,),
            "health_weight": (s + 1,),
            "min_health": (s + 1,),
            "max_health": (s + 1,),
            "min_economic": (s + 1,),
            "max_economic": (s + 1,),
            "policy": (days, s),
            "subsidy": (days,),
            "susceptible": (days, s),
            "infected": (days, s),
            "recovered": (days, s),
            "unemployed": (days, s),
        }
        for name, shape in shapes.items():
            value = getattr(self, name)
            if not isinstance(value, np.ndarray) or value.shape != shape:
                raise ValueError(
                    f"CovidCalibration.{name} must be a numpy array of shape {shape}, got "
                    f"{getattr(value, 'shape', type(value).__name__)}"
                )
            value = value.copy()  # read-only copies: the caller's arrays stay as they were
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        if (self.population <= 0).any():
            raise ValueError("CovidCalibration.population must be positive")
        if not ((self.health_weight >= 0) & (self.health_weight < 1)).all():
            raise ValueError("CovidCalibration.health_weight must lie in [0, 1)")
        if (self.policy < 1).any() or (self.policy > self.num_stringency_levels).any():
            raise ValueError(f"CovidCalibration.policy must lie in 1 .. {self.num_stringency_levels}")
        datetime.datetime.strptime(self.data_start_date, DATE_FORMAT)

    @property
    def num_states(self) -> int:
        return len(self.state_names)

    @property
    def num_days(self) -> int:
        return len(self.policy)

    def day_index(self, date: str) -> int:
        """Days from ``data_start_date`` to ``date`` (``YYYY-MM-DD``)."""
        start = datetime.datetime.strptime(self.data_start_date, DATE_FORMAT)
        return (datetime.datetime.strptime(date, DATE_FORMAT) - start).days

    def valid_start_indices(self) -> range:
        """Day indices at which S, I, R and U are all known (a simulation can start there)."""
        known = np.ones(self.num_days, dtype=bool)
        for series in (self.susceptible, self.infected, self.recovered, self.unemployed):
            known &= np.isfinite(series).all(axis=1)
        days = np.flatnonzero(known)
        if len(days) == 0 or days[-1] - days[0] + 1 != len(days):
            raise ValueError("the calibration's S/I/R/U series are not known on one contiguous range of days")
        return range(int(days[0]), int(days[-1]) + 1)

    def policy_levels(self, day: np.ndarray) -> np.ndarray:
        """Stringency levels of the given day indices (any int array); days before the data are 1
        (fully open, as before the pandemic — the AI Economist pads its history so)."""
        day = np.asarray(day)
        if (day >= self.num_days).any():
            raise ValueError(f"day index beyond the policy series ({self.num_days} days)")
        return np.where(day[..., None] >= 0, self.policy[np.maximum(day, 0)], 1).astype(np.int64)

    def subsidy_levels(
        self, max_annual_subsidy_per_person: float, num_subsidy_levels: int, subsidy_interval: int
    ) -> np.ndarray:
        """(D,) int64: the real-world subsidy series as subsidy levels, the AI Economist's way: each
        payment is rounded to a whole number of levels (one level pays every US resident
        ``max_annual / num_levels`` a year for ``subsidy_interval`` days) and that level holds for
        the ``subsidy_interval`` days from its payment day; overlapping payments add."""
        per_level = self.us_population * max_annual_subsidy_per_person / num_subsidy_levels * subsidy_interval / 365
        levels = np.zeros(self.num_days, dtype=np.int64)
        for day in np.flatnonzero(self.subsidy > 0):
            levels[day : day + subsidy_interval] += int(np.round(self.subsidy[day] / per_level))
        return levels


def _array(values, dtype) -> np.ndarray:
    return np.array(values, dtype=dtype)


def load_ai_economist(folder: str | Path) -> CovidCalibration:
    """A calibration from the AI Economist's folder format (``model_constants.json``,
    ``fitted_params.json``, ``real_world_data.npz``; the copy in its repository is
    ``ai_economist/datasets/covid19_datasets/data_and_fitted_params/``)."""
    folder = Path(folder)
    missing = [
        name
        for name in (MODEL_CONSTANTS_FILE, FITTED_PARAMS_FILE, REAL_WORLD_DATA_FILE)
        if not (folder / name).is_file()
    ]
    if missing:
        raise FileNotFoundError(f"{folder} is not an AI Economist calibration folder: missing {', '.join(missing)}")
    constants = json.loads((folder / MODEL_CONSTANTS_FILE).read_text())
    fitted = json.loads((folder / FITTED_PARAMS_FILE).read_text())
    names = constants["US_STATE_IDX_TO_STATE_NAME"]
    num_states = len(names)
    with np.load(folder / REAL_WORLD_DATA_FILE) as data:  # plain arrays: no pickle needed
        series = {key: data[key] for key in ("policy", "subsidy", "susceptible", "infected", "recovered", "unemployed")}

    def per_agent(governors: str, planner: str) -> np.ndarray:
        return np.array([*fitted[governors], fitted[planner]], dtype=np.float64)

    return CovidCalibration(
        state_names=tuple(names[str(i)] for i in range(num_states)),
        population=_array(constants["US_STATE_POPULATION"], np.int64),
        us_population=int(constants["US_POPULATION"]),
        gdp_per_capita=float(constants["GDP_PER_CAPITA"]),
        num_stringency_levels=int(constants["NUM_STRINGENCY_LEVELS"]),
        mortality=float(constants["SIR_MORTALITY"]),
        recovery_rate=float(constants["SIR_GAMMA"]),
        value_of_life=float(fitted["VALUE_OF_LIFE"]),
        beta_delay=int(fitted["BETA_DELAY"]),
        beta_intercepts=_array(fitted["BETA_INTERCEPTS"], np.float64),
        beta_slopes=_array(fitted["BETA_SLOPES"], np.float64),
        filter_length=int(fitted["FILTER_LEN"]),
        filter_lambdas=_array(fitted["CONV_LAMBDAS"], np.float64),
        # Stored as (S * K, 1, 1), state-major: a grouped 1-d convolution's weights.
        filter_weights=_array(fitted["GROUPED_CONVOLUTIONAL_FILTER_WEIGHTS"], np.float64).reshape(
            num_states, len(fitted["CONV_LAMBDAS"])
        ),
        unemployment_bias=_array(fitted["UNEMPLOYMENT_BIAS"], np.float64),
        health_weight=per_agent(
            "INFERRED_WEIGHTAGE_ON_AGENT_HEALTH_INDEX", "INFERRED_WEIGHTAGE_ON_PLANNER_HEALTH_INDEX"
        ),
        min_health=per_agent("MIN_MARGINAL_AGENT_HEALTH_INDEX", "MIN_MARGINAL_PLANNER_HEALTH_INDEX"),
        max_health=per_agent("MAX_MARGINAL_AGENT_HEALTH_INDEX", "MAX_MARGINAL_PLANNER_HEALTH_INDEX"),
        min_economic=per_agent("MIN_MARGINAL_AGENT_ECONOMIC_INDEX", "MIN_MARGINAL_PLANNER_ECONOMIC_INDEX"),
        max_economic=per_agent("MAX_MARGINAL_AGENT_ECONOMIC_INDEX", "MAX_MARGINAL_PLANNER_ECONOMIC_INDEX"),
        data_start_date=fitted["POLICY_START_DATE"],
        policy=_array(series["policy"], np.int8),
        subsidy=_array(series["subsidy"].reshape(-1), np.float64),
        susceptible=_array(series["susceptible"], np.float64),
        infected=_array(series["infected"], np.float64),
        recovered=_array(series["recovered"], np.float64),
        unemployed=_array(series["unemployed"], np.float64),
    )


# Fields stored as 0-d arrays in the .npz, converted back with these types.
_SCALARS = {
    "us_population": int,
    "gdp_per_capita": float,
    "num_stringency_levels": int,
    "mortality": float,
    "recovery_rate": float,
    "value_of_life": float,
    "beta_delay": int,
    "filter_length": int,
    "data_start_date": str,
}


def save(calibration: CovidCalibration, path: str | Path) -> None:
    """Write ``calibration`` as a compressed ``.npz`` of plain arrays (no pickled objects)."""
    arrays = {f.name: np.asarray(getattr(calibration, f.name)) for f in fields(CovidCalibration)}
    with open(path, "wb") as out:  # a file object: numpy would otherwise append .npz to other names
        np.savez_compressed(out, **arrays)


def load(path: str | Path) -> CovidCalibration:
    """A calibration written by :func:`save`."""
    with np.load(path, allow_pickle=False) as data:
        stored = {key: data[key] for key in data.files}
    expected = {f.name for f in fields(CovidCalibration)}
    if set(stored) != expected:
        raise ValueError(f"{path} is not a calibration file: keys {sorted(stored)} differ from {sorted(expected)}")
    values = {}
    for name, array in stored.items():
        if name in _SCALARS:
            values[name] = _SCALARS[name](array.item())
        elif name == "state_names":
            values[name] = tuple(str(s) for s in array)
        else:
            values[name] = array
    return CovidCalibration(**values)


@functools.cache
def default_calibration() -> CovidCalibration:
    """The calibration shipped in the package (one object per process, so params compare equal)."""
    with resources.as_file(resources.files("gpu_marl_envs") / "data" / SHIPPED_FILE) as path:
        return load(path)


def shipped_path() -> Path:
    """Where the shipped calibration lives in this checkout or installation."""
    return Path(str(resources.files("gpu_marl_envs") / "data" / SHIPPED_FILE))


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_marl_envs.envs.covid_calibration",
        description="Build the shipped COVID-19 calibration from an AI Economist folder.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="convert an AI Economist calibration folder to the package's .npz")
    build.add_argument(
        "folder", type=Path, help="folder with model_constants.json, fitted_params.json, real_world_data.npz"
    )
    build.add_argument(
        "--out", type=Path, default=None, help=f"output file (default: the package's data/{SHIPPED_FILE})"
    )
    args = parser.parse_args(argv)
    calibration = load_ai_economist(args.folder)
    out = args.out or shipped_path()
    save(calibration, out)
    print(
        f"wrote {out} ({out.stat().st_size} bytes): {calibration.num_states} states, "
        f"{calibration.num_days} days from {calibration.data_start_date}"
    )


if __name__ == "__main__":
    _main()
