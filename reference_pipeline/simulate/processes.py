"""Who sends when, which server process takes it, and when that process stops the world.

Times here are float nanoseconds from the start of the run. Each server process (one incarnation of
one instance) has its own clock of *process time*, which stands still while a garbage collection
stops the world: the whole process is simulated in process time, then `Pauses.to_wall` maps every
instant to wall time, so a pause stretches every span in flight in that process, whatever it was doing,
and shifts everything after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference_pipeline.simulate.config import SimConfig

NS_PER_MS = 1e6
NS_PER_S = 1e9


def lognormal(rng: np.random.Generator, median_sigma: tuple[float, float], size: int) -> np.ndarray:
    """Log-normal samples in nanoseconds from a (median ms, sigma) pair."""
    median, sigma = median_sigma
    return rng.lognormal(np.log(median * NS_PER_MS), sigma, size)


def arrivals(rng: np.random.Generator, config: SimConfig) -> np.ndarray:
    """Open-loop Poisson send times (ns): `arrival_rps`, raised to multiple × capacity in each burst.

    Time rescaling: unit-rate exponential gaps are mapped through the inverse of the cumulative rate,
    which is piecewise linear because the rate is piecewise constant.
    """
    base = config.arrival_rps()
    nominal_s = config.requests / base
    bursts = [(start, min(length, nominal_s / 10), multiple * config.capacity_rps())
              for start, length, multiple in sorted(config.bursts)]
    # place the bursts within the run the requests actually last: bursts spend requests faster
    extra = sum((rate - base) * length for _, length, rate in bursts)
    run_s = max(config.requests - extra, 0.2 * config.requests) / base
    cuts = [(0.0, base)]
    for start, length, rate in bursts:
        cuts += [(start * run_s, rate), (start * run_s + length, base)]
    times = np.array([t for t, _ in cuts])
    rates = np.array([r for _, r in cuts])
    intensity = np.concatenate(([0.0], np.cumsum(np.diff(times) * rates[:-1])))
    unit = np.cumsum(rng.exponential(1.0, config.requests))
    k = np.searchsorted(intensity, unit, side="right") - 1
    return (times[k] + (unit - intensity[k]) / rates[k]) * NS_PER_S


@dataclass
class Pauses:
    """Stop-the-world pauses of one process, at process-time instants `at` (sorted)."""

    at: np.ndarray
    duration: np.ndarray
    generation: np.ndarray
    collected: np.ndarray

    def __post_init__(self) -> None:
        self.cum = np.concatenate(([0.0], np.cumsum(self.duration)))
        self.wall_start = self.at + self.cum[:-1]

    def to_wall(self, tau: np.ndarray) -> np.ndarray:
        return tau + self.cum[np.searchsorted(self.at, tau, side="left")]

    def from_wall(self, wall: np.ndarray) -> np.ndarray:
        """Process time of wall instants; an instant inside a pause lands just after it."""
        wall_end = self.wall_start + self.duration
        k = np.searchsorted(wall_end, wall, side="right")
        tau = wall - self.cum[k]
        inside = k < len(self.at)
        inside[inside] = wall[inside] >= self.wall_start[k[inside]]
        tau[inside] = self.at[k[inside]] + 1.0
        return tau


def gc_pauses(rng: np.random.Generator, config: SimConfig, start: float, end: float) -> Pauses:
    """Poisson pauses in [start, end): frequent short young-generation ones, plus gen-2 ones if set."""
    seconds = max(end - start, 0.0) / NS_PER_S
    n_minor = rng.poisson(config.gc_minor_rate * seconds)
    n_major = rng.poisson(config.gc_major_rate * seconds)
    at = rng.uniform(start, end, n_minor + n_major)
    duration = np.concatenate(
        (np.clip(lognormal(rng, config.gc_minor_ms, n_minor), 0.05 * NS_PER_MS, 5 * NS_PER_MS),
         rng.uniform(*config.gc_major_ms, n_major) * NS_PER_MS)
    )
    generation = np.concatenate(((rng.random(n_minor) < 0.15).astype(np.int64), np.full(n_major, 2)))
    collected = np.concatenate((rng.integers(20, 2000, n_minor), rng.integers(20_000, 400_000, n_major)))
    order = np.argsort(at, kind="stable")
    return Pauses(at[order], np.rint(duration[order]), generation[order], collected[order])


@dataclass
class Process:
    """One incarnation of one server instance, accepting requests in [accept_from, accept_until)."""

    index: int
    instance: int
    incarnation: int
    accept_from: float
    accept_until: float
    pauses: Pauses | None = None


def server_processes(config: SimConfig) -> list[Process]:
    """One process per instance, or two when instances restart (rolling, staggered, mid-run)."""
    if not config.restarts:
        return [Process(k, k, 0, 0.0, np.inf) for k in range(config.workers)]
    nominal = config.requests / config.arrival_rps() * NS_PER_S
    spacing = nominal * 0.3 / max(config.workers - 1, 1)
    # one instance down at a time, so some process always accepts
    downtime = min(config.restart_downtime_s * NS_PER_S, spacing / 2) if config.workers > 1 else 0.0
    processes = []
    for k in range(config.workers):
        restart = nominal * 0.35 + spacing * k
        processes.append(Process(len(processes), k, 0, 0.0, restart))
        processes.append(Process(len(processes), k, 1, restart + downtime, np.inf))
    return processes


def route(rng: np.random.Generator, processes: list[Process], arrive: np.ndarray) -> np.ndarray:
    """A load balancer picking uniformly among the processes accepting at each arrival."""
    accepting = np.stack([(arrive >= p.accept_from) & (arrive < p.accept_until) for p in processes], axis=1)
    count = accepting.sum(axis=1)
    if (count == 0).any():
        raise ValueError("a request arrived while no server process was accepting")
    pick = np.floor(rng.random(len(arrive)) * count)
    return np.argmax(np.cumsum(accepting, axis=1) > pick[:, None], axis=1)
