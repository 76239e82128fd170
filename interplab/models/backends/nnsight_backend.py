"""nnsight 0.8 backend: canonical sites -> module paths of the Hugging Face model, read/written inside a trace.

One code path serves local and remote forwards. `forward` turns a request into a *plan* — per location (a module's
input or output, or an operation inside its forward through nnsight's `.source`), in firing order: the parts (one
per site read there: accessor, edit closures, capture name; see `nnsight_plan`) — and runs it with a visitor
closure. Module sites (`module:PATH`) are PyTorch hooks for the length of the forward (`module_hooks`). Locally
the edit closures call the `Edit` objects; remotely (`remote=True` on NDIF, or `remote="local"`, nnsight's
simulation of it) they are each edit's `remote_op`, self-contained torch closures that nnsight's serializer ships
by value, so the server never needs interplab. Remote generation is one nnsight
`session` holding the whole KV-cached decode loop (`generate_session`): one request, not one per token."""
from __future__ import annotations

import nnsight
import torch

from interplab.core.errors import InterplabError, RemoteError, SiteError
from interplab.core.sites import Site
from interplab.models.backends.base import ForwardRequest, ForwardResult, apply_edits, hf_forward_kwargs
from interplab.models.backends.module_hooks import module_hooks
from interplab.models.backends.nnsight_plan import SOURCE_KINDS, locate, unsource
from interplab.models.layout import get_module as _get, paths_for


def _visitor():
    """The plan runner, as a nested function: cloudpickle ships it by value (it uses only torch and builtins).

    plan: [(envoy, chain, where, parts)], locations in the order they fire; chain: attributes read inside the trace
    (into nnsight's `.source`); parts: [(get, put, edit closures, capture name)] in site order (nnsight_plan)."""
    def visit(plan, caps, grad):
        stash = {}
        for env, chain, where, parts in plan:
            for attr in chain:
                env = getattr(env, attr)
            val = env.output if where == "output" else env.input
            cur = val
            for get, put, fns, name in parts:
                if get is None:          # a write that needs no read (a norm's output re-computed by its scale)
                    cur = put(cur, None, stash)
                    continue
                x = x0 = get(cur, stash)
                for f in fns:
                    x = f(x)
                if x is not x0:          # an edit changed it (a no-op edit returns its input)
                    cur = put(cur, x, stash)
                if name is not None:
                    caps[name] = x if x is None else (x.clone() if grad else x.detach().clone())
            if cur is not val:
                if where == "output":
                    env.output = cur
                else:
                    env.input = cur
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
    # every kind but attn_pattern: HF attention returns the pattern without reading it back
    editable_kinds = frozenset({"resid_pre", "ln1_scale", "attn_q", "attn_k", "attn_v", "attn_rot_q", "attn_rot_k",
                                "attn_scores", "attn_z", "attn_out", "resid_mid", "ln2_scale", "mlp_hidden", "mlp_out",
                                "resid_post", "final_norm_scale", "final_norm", "logits", "module"})

    def __init__(self, hf_model, n_heads: int, d_head: int, *, nn=None, remote=False):
        from nnsight import NNsight

        self.paths = paths_for(hf_model)
        self.hf_model = hf_model
        self.nn = nn if nn is not None else NNsight(hf_model)
        self.remote = remote
        self.n_layers = len(_get(hf_model, self.paths.layers))
        cfg = hf_model.config
        self.n_heads, self.d_head = n_heads, d_head
        self.n_kv_heads = int(getattr(cfg, "num_key_value_heads", None) or n_heads)
        self.sourced: set = set()   # modules this forward's plan instrumented through nnsight's `.source`

    def block(self, layer: int):
        return _get(self.nn, self.paths.layers)[layer]

    def _edit_fns(self, site: Site, req: ForwardRequest) -> list:
        edits = req.edits.get(site, ())
        if edits and site.kind == "attn_pattern":
            raise SiteError("editing attn_pattern needs the bridge backend (HF attention returns the pattern but "
                            "does not read it back); use backend='bridge', or edit attn_scores (pre-softmax) or "
                            "attn_z")
        if not edits:
            return []
        if self.remote:
            ops = [e.remote_op(site.name, req.ctx) for e in edits]
            return [f for f in ops if f is not None]
        return [lambda x, s=site: apply_edits(s, x, req)]

    def plan(self, req: ForwardRequest) -> list:
        """[(envoy, chain, where, parts)]: every location the request reads, once, in firing order."""
        if self.remote:
            bad = [s.name for s in (*req.capture, *req.edits) if s.kind in SOURCE_KINDS or s.kind == "module"]
            if bad:
                raise RemoteError(f"{', '.join(bad)} cannot run on a remote engine (they read inside a module's "
                                  "forward or hook a module locally); run the model locally (remote=False)")
        capture = set(req.capture)
        locations: dict[tuple, list] = {}
        for s in req.sites_in_order(self.n_layers):
            fns = self._edit_fns(s, req)
            for i, (key, env, chain, where, (get, put), edits_only) in enumerate(locate(self, s)):
                if edits_only and not fns:
                    continue
                loc = locations.setdefault((key, id(env), chain, where), [key, env, chain, where, []])
                name = s.name if s in capture and i == 0 else None
                loc[4].append((get, put, fns if get is not None else [], name))
        ordered = sorted(locations.values(), key=lambda loc: loc[0])
        return [(env, chain, where, parts) for _, env, chain, where, parts in ordered]

    def _trace_kw(self) -> dict:
        return {"remote": self.remote} if self.remote else {}

    def forward(self, req: ForwardRequest) -> ForwardResult:
        if self.remote and req.grad:
            raise RemoteError("gradients do not run remotely (run(grad=True), steering-vector optimisation); load "
                              "the model locally (remote=False) for gradient-based methods")
        try:
            return self._forward(req)
        finally:
            for module in self.sourced:
                unsource(module)
            self.sourced.clear()

    def _forward(self, req: ForwardRequest) -> ForwardResult:
        plan, visit, grad = self.plan(req), _visitor(), req.grad
        module_caps: dict = {}
        if not plan and not self.remote:
            # nothing to capture or edit: the plain forward computes the same thing without nnsight's per-module
            # interleaving (~13 % of a KV-cached decode step on SmolLM2-135M at one thread)
            with torch.set_grad_enabled(req.grad), module_hooks(self.hf_model, req, module_caps, "nnsight"):
                out = self.hf_model(**hf_forward_kwargs(req))
            kv = getattr(out, "past_key_values", None) if req.use_cache else None
            return ForwardResult(out.logits if req.need_logits else None, module_caps, kv)
        stop = req.stop_site(self.n_layers) is not None
        nn = self.nn
        with torch.set_grad_enabled(req.grad), module_hooks(self.hf_model, req, module_caps, "nnsight"):
            with nn.trace(**hf_forward_kwargs(req), **self._trace_kw()) as tracer:
                caps = {}
                visit(plan, caps, grad)
                caps = nnsight.save(caps)
                if stop:
                    tracer.stop()
                out = nn.output.save()
        captures = {**dict(caps), **module_caps}
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
