"""The engine's scheduler as first written (one loop per concern, every arrival scheduled before and
after it joins), kept as the reference the optimised :class:`benchmarks.sim.engine.Engine` must match
exactly: ``tests/bench/test_sim_speed.py`` replays a rate-curve excerpt through both."""

from __future__ import annotations

import math

from warmscale.benchmarks.sim.engine import Engine, Request, _blocks


class ReferenceEngine(Engine):
    def _attention(self, comp: list[tuple[Request, int, bool]]) -> tuple[float, float]:
        """The prefill chunks' attention term (:meth:`EngineProfile.attention_extra`) at the segment's
        first step, and its growth per step (a single request's context grows by its chunk each
        step; a cohort is taken at its members' mean context, half a prompt). The optimised engine
        inlines it in its ``_plan``."""
        p = self.p
        if p.attn_per_ctx <= 0.0:
            return 0.0, 0.0
        extra = 0.0
        slope = 0.0
        for r, t, pre in comp:
            if not pre:
                continue
            if r.n == 1:
                extra += p.attention_extra(t, r.done + t / 2.0)
                slope += p.attention_extra(t, p.calibration_context + t) - p.attention_extra(t, p.calibration_context)
            else:
                extra += p.attention_extra(t, r.target / (2.0 * r.n))
        return extra, slope

    def enqueue(self, req: Request, now: float) -> None:
        self.sync(now)
        if _blocks(req, req.n * (req.inp + req.out), self.bs) > self.total_blocks:
            self.rejected_total += req.n
            return
        if self._seg is None:
            self.clock = max(self.clock, now)
        self.waiting.append(req)
        self.waiting_n += req.n
        self._plan()

    def _schedule(self) -> list[tuple[Request, int, bool]]:
        p = self.p
        bs = self.bs
        budget = p.max_num_batched_tokens
        comp: list[tuple[Request, int, bool]] = []
        running = self.running
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            pre = r.done < r.target
            t = min(r.target - r.done, budget) if pre else r.n
            if t > budget:
                break
            need = _blocks(r, r.kv + t, bs) - r.blocks
            victim_was_r = False
            while need > self.free_blocks:
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is r:
                    victim_was_r = True
                    break
            if victim_was_r:
                break
            if need > 0:
                r.blocks += need
                self.free_blocks -= need
            comp.append((r, t, pre))
            budget -= t
            i += 1
        if not preempted:
            while self.waiting and budget > 0 and self.running_n < p.max_num_seqs:
                r = self.waiting[0]
                slots = p.max_num_seqs - self.running_n
                if r.n > slots:
                    r = r.split(slots)
                    self.waiting.appendleft(r)
                t = min(r.target - r.done, budget)
                need = _blocks(r, r.kv + t, bs) - r.blocks
                if need > self.free_blocks:
                    break
                self.waiting.popleft()
                self.waiting_n -= r.n
                running.append(r)
                self.running_n += r.n
                if r.t_sched is None:
                    r.t_sched = self.clock
                    self.h_queue.observe(self.clock - r.t_arr, r.n)
                if need > 0:
                    r.blocks += need
                    self.free_blocks -= need
                comp.append((r, t, True))
                budget -= t
        return comp

    def _plan(self) -> None:
        if not self.running and not self.waiting:
            self._seg = None
            self.seg_end = math.inf
            return
        comp = self._schedule()
        if not comp:  # nothing can run (cannot happen with requests that fit the cache); stay idle
            self._seg = None
            self.seg_end = math.inf
            return
        k = 1 << 30
        n_pre = 0
        nseq = 0
        new_tok = 0
        pre_tok = 0
        kv0 = 0
        for r, t, pre in comp:
            nseq += r.n
            new_tok += t
            kv0 += r.kv
            if pre:
                n_pre += 1
                pre_tok += t
                left = r.target - r.done
                k = min(k, left // t if left > t else 1)
            else:
                k = min(k, r.out - r.gen)
        if n_pre > 1:
            k = 1
        # A queue head left waiting with budget and slots to spare did not fit the KV cache: that stays
        # so until a finish frees blocks (the KV only grows meanwhile), so the segment may go on.
        if k > 1:
            extra = 0
            bs = self.bs
            for r, t, _ in comp:
                extra += _blocks(r, r.kv + k * t, bs) - r.blocks
            if extra > self.free_blocks:
                k = 1
        k = max(1, min(k, self.max_jump))
        k, a, s = self._segment_time(k, nseq, new_tok, kv0, self._attention(comp) if pre_tok else (0.0, 0.0))
        g = float(new_tok)
        self._seg = (comp, k, a, g, s)
        self.seg_end = self.clock + self._dur(k, a, s)

    def _apply(self, j: int) -> None:
        """Execute the first ``j`` steps of the current segment."""
        seg = self._seg
        assert seg is not None
        comp, _k, a, g, s = seg
        dur = self._dur(j, a, s)
        t_end = self.clock + dur
        self.busy_s += dur
        self.steps_total += j
        self.h_iter.observe(g, j)
        bs = self.bs
        step = dur / j
        finished: list[Request] = []
        for r, t, pre in comp:
            add = t * j
            r.kv += add
            b = _blocks(r, r.kv, bs)
            if b > r.blocks:
                self.free_blocks -= b - r.blocks
                r.blocks = b
            if pre:
                r.done += add
                if r.done >= r.target:
                    if r.t_first is None:
                        t0 = r.t_sched if r.t_sched is not None else r.t_arr
                        first = t_end if r.n == 1 else t0 + (t_end - t0) * (r.n + 1) / (2 * r.n)
                        r.t_first = first
                        ttft = first - r.t_arr
                        self.h_ttft.observe(ttft, r.n)
                        self.h_prefill.observe(first - t0, r.n)
                        self.prompt_tokens_total += r.inp * r.n
                        if self.sink is not None:
                            self.sink.append((r.t_arr, ttft, r.n))
                    else:
                        self.h_itl.observe(step, r.n)
                    r.gen += 1
                    self.generation_tokens_total += r.n
                    if r.gen >= r.out:
                        finished.append(r)
            else:
                r.gen += j
                self.generation_tokens_total += r.n * j
                self.h_itl.observe(step, r.n * j)
                if r.gen >= r.out:
                    finished.append(r)
        self.clock = t_end
        for r in finished:
            self._finish(r, t_end)
