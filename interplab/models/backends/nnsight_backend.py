"""nnsight 0.8 backend: canonical sites -> module paths of the Hugging Face model, read/written inside a trace.

One code path serves local and remote forwards. `forward` turns a request into a *plan* — per site, in execution
order: (envoy, "input"/"output", tuple index, head split, edit closures, capture name) — and runs it with a
visitor closure. Locally the edit closures call the `Edit` objects; remotely (`remote=True` on NDIF, or
`remote="local"`, nnsight's simulation of it) they are each edit's `remote_op`, self-contained torch closures that
nnsight's serializer ships by value, so the server never needs interplab. Remote generation is one nnsight
`session` holding the whole KV-cached decode loop (`generate_session`): one request, not one per token."""
from __future__ import annotations

import nnsight
import torch

from interplab.core.errors import InterplabError, RemoteError, SiteError
from interplab.core.sites import Site
from interplab.models.backends.base import ForwardRequest, ForwardResult, apply_edits, hf_forward_kwargs
from interplab.models.layout import get_module as _get, paths_for


def _visitor():
    """The plan runner, as a nested function: cloudpickle ships it by value (it uses only torch and builtins)."""
    def visit(plan, caps, grad):
        for env, where, idx, heads, fns, name in plan:
            val = env.output if where == "output" else env.input
            tup = idx is not None and isinstance(val, tuple)
            x = val[idx] if tup else val
            flat = x
            if heads is not None:
                x = x.reshape(*x.shape[:-1], heads[0], heads[1])
            for f in fns:
                x = f(x)
            if fns:
                new = x.reshape(flat.shape) if heads is not None else x
                if tup:
                    new = (*val[:idx], new, *val[idx + 1:])
                if where == "output":
                    env.output = new
                else:
                    env.input = new
            if name is not None:
                caps[name] = x if x is None else (x.clone() if grad else x.detach().clone())
    return visit


def _step_runner():
    """One KV-cached forward inside a remote session, returning its captures, last logits and cache. A nested
    function: nnsight ships it by value with its own source, so its `with` block is found on the server."""
    def run_step(nn, visit, plan, kw):
        caps = {}
        with nn.trace(**kw):
            visit(plan, caps, False)
            out = nn.output
            caps["__logits__"] = out.logits[:, -1].detach().clone()
            caps["__kv__"] = out.past_key_values
        return caps
    return run_step


class NNsightBackend:
    name = "nnsight"
    editable_kinds = frozenset({"resid_pre", "resid_post", "attn_z", "attn_out", "mlp_out", "final_norm", "logits"})

    def __init__(self, hf_model, n_heads: int, d_head: int, *, nn=None, remote=False):
        from nnsight import NNsight

        self.paths = paths_for(hf_model)
        self.hf_model = hf_model
        self.nn = nn if nn is not None else NNsight(hf_model)
        self.remote = remote
        self.n_layers = len(_get(hf_model, self.paths.layers))
        self.n_heads, self.d_head = n_heads, d_head

    def _block(self, layer: int):
        return _get(self.nn, self.paths.layers)[layer]

    def _locate(self, site: Site):
        """(envoy, "input"/"output", tuple index or None, head split or None) of a site."""
        kind, p = site.kind, self.paths
        if kind == "resid_pre":
            return self._block(site.layer), "input", None, None
        if kind == "resid_post":
            return self._block(site.layer), "output", 0, None  # index 0 only when the block returns a tuple
        if kind == "attn_z":
            return _get(self._block(site.layer), p.o_proj), "input", None, (self.n_heads, self.d_head)
        if kind == "attn_out" and p.attn_out:
            return _get(self._block(site.layer), p.attn_out), "output", None, None
        if kind in ("attn_out", "attn_pattern"):
            return _get(self._block(site.layer), p.attn), "output", 0 if kind == "attn_out" else 1, None
        if kind == "mlp_out":
            return _get(self._block(site.layer), p.mlp_out or p.mlp), "output", None, None
        if kind in ("final_norm", "logits"):
            return _get(self.nn, p.final_norm if kind == "final_norm" else p.lm_head), "output", None, None
        raise SiteError(f"unsupported site {site}")  # pragma: no cover - parse_site guarantees the kind

    def _edit_fns(self, site: Site, req: ForwardRequest) -> list:
        edits = req.edits.get(site, ())
        if edits and site.kind == "attn_pattern":
            raise SiteError("editing attn_pattern needs the bridge backend (HF attention returns the pattern but "
                            "does not read it back); use backend='bridge' or edit attn_z")
        if not edits:
            return []
        if self.remote:
            ops = [e.remote_op(site.name, req.ctx) for e in edits]
            return [f for f in ops if f is not None]
        return [lambda x, s=site: apply_edits(s, x, req)]

    def plan(self, req: ForwardRequest) -> list:
        capture = set(req.capture)
        return [(*self._locate(s), self._edit_fns(s, req), s.name if s in capture else None)
                for s in req.sites_in_order(self.n_layers)]

    def _trace_kw(self) -> dict:
        return {"remote": self.remote} if self.remote else {}

    def forward(self, req: ForwardRequest) -> ForwardResult:
        if self.remote and req.grad:
            raise RemoteError("gradients do not run remotely (run(grad=True), steering-vector optimisation); load "
                              "the model locally (remote=False) for gradient-based methods")
        plan, visit, grad = self.plan(req), _visitor(), req.grad
        if not plan and not self.remote:
            # nothing to capture or edit: the plain forward computes the same thing without nnsight's per-module
            # interleaving (~13 % of a KV-cached decode step on SmolLM2-135M at one thread)
            with torch.set_grad_enabled(req.grad):
                out = self.hf_model(**hf_forward_kwargs(req))
            kv = getattr(out, "past_key_values", None) if req.use_cache else None
            return ForwardResult(out.logits if req.need_logits else None, {}, kv)
        stop = req.stop_site(self.n_layers) is not None
        nn = self.nn
        with torch.set_grad_enabled(req.grad):
            with nn.trace(**hf_forward_kwargs(req), **self._trace_kw()) as tracer:
                caps = {}
                visit(plan, caps, grad)
                caps = nnsight.save(caps)
                if stop:
                    tracer.stop()
                out = nn.output.save()
        captures = dict(caps)
        _check_patterns(captures)
        if stop:
            return ForwardResult(None, captures, None)
        kv = getattr(out, "past_key_values", None) if req.use_cache else None
        logits = out.logits if req.need_logits else None
        if logits is not None and not req.grad:
            logits = logits.detach()  # grad mode is thread-local; a remote engine's forward may have kept a graph
        return ForwardResult(logits, captures, kv)

    def generate_session(self, prefill: ForwardRequest, steps: list[tuple[dict, list]], *, greedy: bool,
                         temperature: float, seed, stop_ids: torch.Tensor, stop_at_eos: bool, pad_id: int):
        """The whole KV-cached generation as one nnsight session (one remote request).

        prefill: the prompt forward. steps[s] = (position ids [b, 1] of decode step s, its plan). Returns
        (prefill captures, new tokens [b, n], step logits [b, n, V], per-step captures, per-step active masks)."""
        visit, run_step, nn = _visitor(), _step_runner(), self.nn
        pre_plan, pre_kw = self.plan(prefill), hf_forward_kwargs(prefill)
        step_plans = [(pos, plan) for pos, plan in steps]
        mask0 = prefill.attention_mask
        n_new = len(step_plans) + 1
        # Only calls in the session body: nnsight re-parses this block, so nested `with` blocks live in run_step.
        with nn.session(**self._trace_kw()):
            pre_caps = run_step(nn, visit, pre_plan, pre_kw)
            last, kv, mask = pre_caps.pop("__logits__"), pre_caps.pop("__kv__"), mask0
            gen = torch.Generator(device="cpu")
            if seed is not None:
                gen.manual_seed(seed)
            active = torch.ones(mask0.shape[0], dtype=torch.bool, device=mask0.device)
            toks, logit_steps, step_caps, actives = [], [], [], []
            for step in range(n_new):
                if greedy:
                    nxt = last.argmax(-1)
                else:
                    probs = torch.softmax(last.float() / temperature, -1).cpu()
                    nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1).to(last.device)
                nxt = torch.where(active, nxt, torch.full_like(nxt, pad_id))
                toks.append(nxt)
                logit_steps.append(last)
                if stop_at_eos and stop_ids.numel():
                    active = active & ~torch.isin(nxt, stop_ids.to(nxt.device))
                if step == n_new - 1 or not bool(active.any()):
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
                actives.append(active)
                pos, plan = step_plans[step]
                kw = dict(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos.to(mask.device), cache=kv,
                          use_cache=True)
                caps = run_step(nn, visit, plan, kw)
                last, kv = caps.pop("__logits__"), caps.pop("__kv__")
                step_caps.append(caps)
            result = nnsight.save((pre_caps, torch.stack(toks, 1), torch.stack(logit_steps, 1), step_caps, actives))
        _check_patterns(result[0])
        return result


def _check_patterns(captures: dict) -> None:
    for k, v in captures.items():
        if v is None:
            raise InterplabError(f"{k}: the attention module returned no pattern; capturing attn_pattern needs "
                                 "eager attention (LabModel switches to it for such forwards; a model loaded with "
                                 "a fixed attn_implementation must use 'eager')")
