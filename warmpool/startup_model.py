"""The replica startup ladder and what each warm state removes from it (pure, no I/O).

A replica that starts from nothing climbs five phases in series: node provisioning, image pull,
weight download, weight load (disk to GPU) and engine init (profiling, KV allocation,
torch.compile, CUDA-graph capture), then the readiness probe notices it. Each kind of warmth
skips or shortens phases:

- ``capacity_held`` (a placeholder pod holds a GPU node, or a node is still up): no provisioning;
- ``image_present`` (pre-pulled, or the node already ran the image): no image pull;
- ``weights_local`` (pre-staged node-local cache): no download;
- ``compile_cache`` (persisted torch.compile / graph cache next to the weights): shorter init;
- ``engine_sleeping`` (a vLLM engine in sleep mode on the GPU): only the wake-up remains.

Both the trace-replay benchmark (``benchmarks/sim``) and the cold-vs-warm benchmark use this
module, so their start-up times agree. Every number carries its source: the section of
``shared/reference/coldstart-and-warm-pools.md`` it comes from, and the value picked in the
quoted range (mid-range unless noted).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

PHASES: tuple[str, ...] = ("provision", "image_pull", "weights_download", "weights_load", "engine_init", "readiness")


@dataclass(frozen=True)
class WarmState:
    """What is already in place where the new replica lands."""

    capacity_held: bool = False
    image_present: bool = False
    weights_local: bool = False
    compile_cache: bool = False
    engine_sleeping: bool = False

    def label(self) -> str:
        if self.engine_sleeping:
            return "sleeping"
        if self.capacity_held and self.image_present and self.weights_local:
            return "placeholder+staged"
        if self.image_present and self.weights_local:
            return "staged"
        if self.capacity_held and self.image_present:
            return "warm-node"
        if self.capacity_held:
            return "placeholder"
        return "cold"


COLD = WarmState()
# A node that just ran a replica of the same Deployment (kept by the cluster autoscaler's
# scale-down-unneeded-time): GPU there, image in containerd's store, weights gone with the pod.
RETAINED_NODE = WarmState(capacity_held=True, image_present=True)
# A placeholder pod on a node where the warm-pool controller pulled the image and staged the
# weights and compile cache: what warmscale's warm pool holds.
PLACEHOLDER_STAGED = WarmState(capacity_held=True, image_present=True, weights_local=True, compile_cache=True)
# Staged node that still has to be provisioned (image/weights on a boot or data disk built with
# the node, e.g. a GKE secondary boot disk): provisioning only.
STAGED_UNHELD = WarmState(image_present=True, weights_local=True, compile_cache=True)
SLEEPING = WarmState(capacity_held=True, image_present=True, weights_local=True, compile_cache=True,
                     engine_sleeping=True)

# Names used by scaler.warm_status.WARM_STATES (what the warm-pool controller measures).
NAMED_STATES: dict[str, WarmState] = {
    "cold": COLD,
    "staged": STAGED_UNHELD,
    "placeholder+staged": PLACEHOLDER_STAGED,
    "retained-node": RETAINED_NODE,
    "sleeping": SLEEPING,
}


@dataclass(frozen=True)
class StartupProfile:
    """Seconds per phase for one (model, GPU shape); ``sources`` says where each number comes from."""

    name: str
    gpus_per_replica: int
    provision_s: float
    image_pull_s: float
    weights_download_s: float
    weights_load_s: float
    engine_init_cold_s: float
    engine_init_cached_s: float
    wake_s: float
    readiness_s: float
    sources: tuple[tuple[str, str], ...] = ()

    def scaled(self, factor: float) -> StartupProfile:
        """Every phase multiplied by ``factor`` (sensitivity runs)."""
        changes = {f.name: getattr(self, f.name) * factor for f in fields(self) if f.name.endswith("_s")}
        return replace(self, **changes)


SOURCE_DOC = "shared/reference/coldstart-and-warm-pools.md"

PROFILES: dict[str, StartupProfile] = {
    "8b-h100": StartupProfile(
        name="8b-h100",
        gpus_per_replica=1,
        provision_s=120.0,
        image_pull_s=180.0,
        weights_download_s=60.0,
        weights_load_s=25.0,
        engine_init_cold_s=120.0,
        engine_init_cached_s=60.0,
        wake_s=3.0,
        readiness_s=5.0,
        sources=(
            ("provision_s", "(a) node provision 60-180 s typical (VM boot, join, driver, device plugin): mid 120 s"),
            ("image_pull_s", "(a) image pull+unpack 10-12 GB: 2-6 min typical: 180 s"),
            ("weights_download_s", "(a) weights download about 60 s from the Hub (tensorfuse: 61 s for 8B)"),
            ("weights_load_s", "(a) load disk->GPU 18-33 s with the default loader: 25 s"),
            ("engine_init_cold_s", "(a) engine init 100-200 s cold (tensorfuse 94 s init + compile): 120 s"),
            ("engine_init_cached_s", "(a) about 60 s with compile caches (vllm #20264: 34-59 s)"),
            ("wake_s", "(c)4 vLLM sleep L1 wake 0.1-6 s; end-to-end row '0.3-3 s wake' for 8B: 3 s"),
            ("readiness_s", "(c)6 readiness: half of a 10 s startup/readiness probe period (Kubernetes default)"),
        ),
    ),
    "70b-h100-tp4": StartupProfile(
        name="70b-h100-tp4",
        gpus_per_replica=4,
        provision_s=180.0,
        image_pull_s=180.0,
        weights_download_s=300.0,
        weights_load_s=60.0,
        engine_init_cold_s=180.0,
        engine_init_cached_s=120.0,
        wake_s=6.0,
        readiness_s=5.0,
        sources=(
            ("provision_s", "(a) node provision 60-180 s, multi-GPU nodes scarcer: upper end 180 s"),
            ("image_pull_s", "(a) image pull: same image as 8B: 180 s"),
            ("weights_download_s", "(a) 70B weights 4-10+ min naive (Anyscale 4 min 25 s): 300 s"),
            ("weights_load_s", "(a) load 30-90 s for 70B (ServerlessLLM: 84 s for Llama-2-70B): 60 s"),
            ("engine_init_cold_s", "(a) engine init 1-5 min for 70B: 180 s"),
            ("engine_init_cached_s", "(a)/(c)4 compile cache (vllm PR #33641 70B compile 24->14 s): 120 s"),
            ("wake_s", "(a) end-to-end row: 3-6 s wake for 70B: 6 s"),
            ("readiness_s", "(c)6 readiness: half of a 10 s probe period"),
        ),
    ),
    "70b-h100-tp8": StartupProfile(
        name="70b-h100-tp8",
        gpus_per_replica=8,
        provision_s=180.0,
        image_pull_s=180.0,
        weights_download_s=300.0,
        weights_load_s=45.0,
        engine_init_cold_s=180.0,
        engine_init_cached_s=120.0,
        wake_s=6.0,
        readiness_s=5.0,
        sources=(
            ("provision_s", "(a) 8-GPU nodes scarcer: upper end 180 s"),
            ("image_pull_s", "(a) same image: 180 s"),
            ("weights_download_s", "(a) 70B weights 4-10+ min naive: 300 s"),
            ("weights_load_s", "(a) 30-90 s; 8 PCIe links in parallel shorten the copy: 45 s"),
            ("engine_init_cold_s", "(a) 1-5 min for 70B: 180 s"),
            ("engine_init_cached_s", "(a)/(c)4 with compile cache: 120 s"),
            ("wake_s", "(a) 3-6 s wake for 70B: 6 s"),
            ("readiness_s", "(c)6 half of a 10 s probe period"),
        ),
    ),
}


def ladder(profile: StartupProfile, warm: WarmState) -> tuple[tuple[str, float], ...]:
    """The phases a replica goes through from ``warm``, with their seconds (skipped phases omitted)."""
    if warm.engine_sleeping:
        return (("wake", profile.wake_s), ("readiness", profile.readiness_s))
    steps: list[tuple[str, float]] = []
    if not warm.capacity_held:
        steps.append(("provision", profile.provision_s))
    if not warm.image_present:
        steps.append(("image_pull", profile.image_pull_s))
    if not warm.weights_local:
        steps.append(("weights_download", profile.weights_download_s))
    steps.append(("weights_load", profile.weights_load_s))
    init = profile.engine_init_cached_s if warm.compile_cache else profile.engine_init_cold_s
    steps.append(("engine_init", init))
    steps.append(("readiness", profile.readiness_s))
    return tuple(steps)


def time_to_ready(profile: StartupProfile, warm: WarmState) -> float:
    """Seconds from pod creation (or node request) to Ready from ``warm``."""
    return sum(s for _, s in ladder(profile, warm))


def staging_time(profile: StartupProfile, *, new_node: bool) -> float:
    """Seconds until a replenished placeholder is warm: a new node is provisioned, then the image
    is pulled and the weights staged (the controller's pre-pull and stager Jobs run in parallel,
    so the longer of the two counts); on an existing node only the staging remains."""
    staging = max(profile.image_pull_s, profile.weights_download_s)
    return (profile.provision_s if new_node else 0.0) + staging


def time_to_ready_table(profile: StartupProfile) -> dict[str, float]:
    """Time-to-ready for each named warm state (what WarmStatus.time_to_ready_s would carry)."""
    return {name: time_to_ready(profile, w) for name, w in NAMED_STATES.items()}


# Variants: faster-engine configurations the reference documents, kept out of PROFILES so the
# trace-replay benchmark's profile set and numbers are unchanged. Only the phases named in
# ``sources`` differ from the base profile.
VARIANTS: dict[str, StartupProfile] = {
    "8b-h100-fastload": replace(
        PROFILES["8b-h100"],
        name="8b-h100-fastload",
        weights_load_s=7.0,
        engine_init_cached_s=34.0,
        sources=(
            *(s for s in PROFILES["8b-h100"].sources if s[0] not in ("weights_load_s", "engine_init_cached_s")),
            ("weights_load_s", "(a) 'Weights load, disk to GPU' row: 6-8 s with a parallel loader (Run:ai "
                               "streamer / fastsafetensors) on local NVMe: mid 7 s (applies cold and warm)"),
            ("engine_init_cached_s", "(a) phase sources: tensorfuse with the compile cache persisted, engine "
                                     "init 34 s; vllm #20264 init 34 s on a compile-cache hit (lower end of "
                                     "34-59 s; #20264 reports the first response at 59 s)"),
        ),
    ),
}


def profile(name: str) -> StartupProfile:
    """A base profile or a variant by name."""
    return PROFILES[name] if name in PROFILES else VARIANTS[name]
