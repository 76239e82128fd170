"""LabModel: one interface over both backends. Tokenizing, padding, the generation loop and output shapes live here
once; backends only run single forwards."""
from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from typing import Any, Iterable, Sequence

import torch

from interplab.core.errors import ChatTemplateNotice, InputError, RemoteError, UnknownTokenWarning
from interplab.core.edit import Edit, ModelShape, StepContext
from interplab.models import weights
from interplab.models.backends.attn_switch import AttentionSwitch
from interplab.models.backends.base import ForwardRequest
from interplab.models.inputs import Batch, prompt_mode, to_batch_checked
from interplab.models.outputs import Cache, GenerateOutput, RunOutput
from interplab.core.sites import ModuleSite, Site, has_key_axis, parse_site, parse_sites, valid_sites


class LabModel:
    """A causal LM with canonical activation sites, captures and explicit edits.

    Attributes: n_layers, n_heads (query heads), n_kv_heads, d_model, d_head, d_vocab, d_mlp (together: `shape`,
    the ModelShape every edit is validated against), n_ctx, tokenizer, hf_model (the transformers module), name,
    backend, device, dtype."""

    def __init__(self, backend_impl, tokenizer, *, name: str, path: str | None = None, output_device="cpu"):
        self._impl = backend_impl
        self.tokenizer = tokenizer
        self.hf_model = backend_impl.hf_model
        self.name = name
        self.path = path
        cfg = self.hf_model.config
        self.config = cfg
        self.n_layers = int(backend_impl.n_layers)
        self.n_heads = int(getattr(cfg, "num_attention_heads", None) or cfg.n_head)
        self.n_kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.n_heads)
        self.d_model = int(getattr(cfg, "hidden_size", None) or cfg.n_embd)
        self.d_head = int(getattr(cfg, "head_dim", None) or self.d_model // self.n_heads)
        self.d_vocab = int(cfg.vocab_size)
        d_mlp = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None)
        self.d_mlp = int(d_mlp) if d_mlp else (4 * self.d_model if getattr(cfg, "model_type", "") == "gpt2" else None)
        self.n_ctx = int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", 2048))
        p = next(self.hf_model.parameters())
        # Inputs go where the embedding is (the first device of a device_map); a remote model's local copy lives
        # on the meta device, so its inputs are built on the CPU and shipped.
        self.device = p.device if p.device.type != "meta" else torch.device("cpu")
        self.dtype = p.dtype
        # Where run/generate return captures (None: wherever the site's layer ran).
        self.output_device = torch.device(output_device) if output_device is not None else None
        self.eos_token_id = tokenizer.eos_token_id
        self.stop_token_ids = _stop_ids(tokenizer, self.hf_model)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # One hooked forward at a time per model: hooks live on the shared modules for the length of a forward, so
        # two threads' forwards must not overlap (see docs/reliability.md, "Concurrency contract").
        self._forward_lock = threading.Lock()
        self._attention = getattr(backend_impl, "attention", None) or AttentionSwitch(self.hf_model)
        self.shape = ModelShape.of(self)
        self._validated: dict[int, weakref.ref] = {}
        # Whether plain strings are user turns by default (docs/hook_layer.md, "Prompts: text and chat"): only for a
        # checkpoint that declares it was trained on chats (an interplab card with format "chat", e.g. toy-chat).
        # A template alone proves nothing (toy-base, text-base, random test checkpoints and many hub base models
        # carry one), so elsewhere strings stay raw text as in transformers; assign True to opt in.
        self.chat_default = self.is_chat and trained_prompt_format(path) == "chat"
        self._template_noticed = False   # the ChatTemplateNotice is shown once per model

    @property
    def backend(self) -> str:
        return self._impl.name

    @property
    def bridge(self):
        """The TransformerLens TransformerBridge (bridge backend only), for TL-native tools such as SAELens."""
        if self.backend != "bridge":
            raise InputError(f"{self.name} is loaded on the {self.backend} backend; load it with backend='bridge'")
        return self._impl.bridge

    @property
    def nnsight_model(self):
        """The nnsight wrapper (nnsight backend only), for writing raw nnsight traces."""
        if self.backend != "nnsight":
            raise InputError(f"{self.name} is loaded on the {self.backend} backend; load it with backend='nnsight'")
        return self._impl.nn

    # ----------------------------------------------------------------- weights (x @ W, float64, CPU)
    def attention_weights(self) -> dict[str, torch.Tensor]:
        """W_Q [L, H, d_model, d_head], W_K / W_V [L, H_kv, d_model, d_head] (GQA: one per KV group),
        W_O [L, H, d_head, d_model]."""
        return weights.attention_weights(self.hf_model, self.n_heads, self.n_kv_heads, self.d_head)

    def mlp_weights(self) -> dict[str, torch.Tensor]:
        """W_in / W_out (and W_gate for gated MLPs) per layer."""
        return weights.mlp_weights(self.hf_model)

    def unembedding(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(W_U [d_model, d_vocab], b_U or None)."""
        return weights.unembedding(self.hf_model)

    @property
    def final_norm_module(self) -> torch.nn.Module:
        """The final norm module itself (e.g. to apply the model's own norm in a logit lens)."""
        return weights.final_norm(self.hf_model)

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., d_model] (a final-norm output) -> logits [..., d_vocab] through the model's own output layer."""
        head = self.hf_model.get_output_embeddings()
        with torch.no_grad():
            return head(x.to(head.weight.dtype).to(head.weight.device))

    def __repr__(self) -> str:
        return (f"LabModel({self.name!r}, backend={self.backend!r}, n_layers={self.n_layers}, n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads}, d_model={self.d_model}, d_head={self.d_head}, d_vocab={self.d_vocab}, "
                f"device={str(self.device)!r}, dtype={str(self.dtype).replace('torch.', '')!r})")

    # ----------------------------------------------------------------- inputs and sites
    def sites(self) -> list[str]:
        """Every valid canonical site name for this model (any `module:PATH` of `module_paths()` is valid too)."""
        return valid_sites(self.n_layers)

    def site(self, name: str) -> Site:
        return self._resolve(parse_site(name, self.n_layers))

    def module_paths(self) -> list[str]:
        """Every module path of the Hugging Face model in its own names, for module sites: `module:PATH` reads a
        module's output, `module:PATH:input` its first input (docs/hook_layer.md, "Any other module")."""
        from interplab.models.layout import module_paths

        return module_paths(self.hf_model)

    def _resolve(self, site: Site) -> Site:
        """A module site checked against the model (SiteError naming close paths) and told which block it is in."""
        if not isinstance(site, ModuleSite):
            return site
        from interplab.models.layout import module_layer, resolve_module

        resolve_module(self.hf_model, site.path)
        return ModuleSite(site.path, site.io, layer=module_layer(self.hf_model, site.path))

    def _sites(self, capture) -> list[Site]:
        return [self._resolve(s) for s in parse_sites(capture, self.n_layers)] if capture else []

    @property
    def is_chat(self) -> bool:
        """True when the checkpoint's tokenizer has a chat template (see `chat_default` for what plain strings mean)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    def tokenize(self, inputs: Any, *, chat: bool | None = None, add_special_tokens: bool = True,
                 warn_unknown: bool = True) -> Batch:
        """Left-padded Batch with position ids counting real tokens only: exactly the ids `run`/`generate` see.

        Prompts (docs/hook_layer.md, "Prompts: text and chat"): a chat conversation (a list of {"role", "content"}
        dicts, or a list of them) always goes through the checkpoint's chat template. A plain string, with
        chat=None (the default), is rendered as one user turn when the model has a chat template, is tokenized as is
        when it already holds the template's markers (e.g. `<|im_start|>`: no <bos> is added, the template decides),
        and goes through `tokenizer(text)` (with its <bos>) on a model without a template. chat=False always
        tokenizes plain text with the tokenizer's special tokens (a raw-format prompt); chat=True requires a
        template. A model whose checkpoint was trained on raw text (`chat_default` False, e.g. toy-base) reads chat=None
        as chat=False. Text the tokenizer maps to its unknown token raises an `UnknownTokenWarning` naming it."""
        batch, unknown = to_batch_checked(inputs, self.tokenizer, add_special_tokens=add_special_tokens,
                                          chat=self._chat(chat))
        if unknown and warn_unknown:
            warnings.warn(unknown_token_message(self.name, unknown), UnknownTokenWarning, stacklevel=3)
        if chat is None and not self._template_noticed and self._templates_a_string(inputs):
            self._template_noticed = True
            warnings.warn(template_notice(self), ChatTemplateNotice, stacklevel=3)
        if batch.input_ids.shape[1] > self.n_ctx:
            raise InputError(f"prompt of {batch.input_ids.shape[1]} tokens is longer than the model's context of "
                             f"{self.n_ctx} tokens; truncate it")
        if int(batch.input_ids.max()) >= self.d_vocab or int(batch.input_ids.min()) < 0:
            raise InputError(f"token ids must lie in [0, {self.d_vocab}); got max {int(batch.input_ids.max())}")
        return batch.to(self.device)

    def unknown_tokens(self, inputs: Any, *, chat: bool | None = None) -> list[str]:
        """The pieces of `inputs` (as `tokenize` would read them) that the tokenizer maps to its unknown token."""
        return to_batch_checked(inputs, self.tokenizer, chat=self._chat(chat))[1]

    def _templates_a_string(self, inputs: Any) -> bool:
        """Whether the chat=None reading of `inputs` wraps some plain string in the chat template."""
        if self._chat(None) == "text":
            return False
        strings = [inputs] if isinstance(inputs, str) else (
            [x for x in inputs if isinstance(x, str)] if isinstance(inputs, (list, tuple)) else [])
        return any(prompt_mode(x, self.tokenizer, None) == "template" for x in strings)

    def to_str_tokens(self, inputs: Any, *, chat: bool | None = None) -> list[str] | list[list[str]]:
        """The tokens the model reads for `inputs` (as `run` would tokenize them, template included), each decoded
        to its text (' Paris', not 'ĠParis'); a list of token ids is decoded as is. One prompt -> a list of
        strings; several -> a list per prompt."""
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, int) for t in inputs):
            return [self.tokenizer.decode([t]) for t in inputs]
        batch = self.tokenize(inputs, chat=chat)
        rows = [[self.tokenizer.decode([t]) for t in batch.row_tokens(i)] for i in range(batch.shape[0])]
        return rows[0] if isinstance(inputs, str) else rows

    def token_id(self, token) -> int:
        """A token given as an int id or as a string that tokenizes to exactly one token (a leading-space variant
        is tried too, for BPE vocabularies): the id that `interplab.models.metrics` and the lenses take."""
        if isinstance(token, int) or (hasattr(token, "item") and not isinstance(token, str)):
            t = int(token)
            if not 0 <= t < self.d_vocab:
                raise InputError(f"token id {t} is outside the vocabulary [0, {self.d_vocab})")
            return t
        if not isinstance(token, str) or not token:
            raise InputError(f"a token must be an int id or a non-empty string, got {token!r}")
        for cand in (token, " " + token.lstrip()):
            ids = self.tokenizer(cand, add_special_tokens=False)["input_ids"]
            if len(ids) == 1:
                return int(ids[0])
        pieces = self.tokenizer.convert_ids_to_tokens(self.tokenizer(token, add_special_tokens=False)["input_ids"])
        raise InputError(f"{token!r} is not a single token of {self.name}'s tokenizer (it is {pieces}); pass a "
                         "token id, or compare the first token of each answer")

    def _chat(self, chat: bool | None) -> bool | None:
        """chat=None means "the model's default": template rules on a chat model, plain text otherwise."""
        if chat is None and not self.chat_default:
            return "text"          # strings as raw text; an explicit conversation still uses the template
        return chat

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a chat rendered with the checkpoint's own chat template."""
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise InputError(f"{self.name} has no chat template; pass plain text instead")
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)

    def _edits_by_site(self, edits: Iterable[Edit] | None, padded: bool = False) -> dict[Site, list[Edit]]:
        out: dict[Site, list[Edit]] = {}
        if padded:
            for layer in range(self.n_layers):
                out[Site("resid_post", layer)] = [_PAD_GUARD]
        for e in edits or ():
            if not isinstance(e, Edit):
                raise InputError(f"edits must be interplab.interventions.Edit objects, got {type(e).__name__}")
            self._validate_once(e)
            for s in e.sites:
                site = self._resolve(parse_site(s, self.n_layers))
                if site.kind not in self._impl.editable_kinds:
                    raise InputError(f"the {self.backend} backend cannot edit {site.kind}; "
                                     f"editable: {sorted(self._impl.editable_kinds)}")
                out.setdefault(site, []).append(e)
        return out

    def _validate_once(self, e: Edit) -> None:
        """`e.validate(self.shape)` the first time this edit object meets this model (even a no-op edit: a gate map
        with an extra row is a bug whether or not it changes anything)."""
        ref = self._validated.get(id(e))
        if ref is not None and ref() is e:
            return
        e.validate(self.shape)
        try:
            self._validated[id(e)] = weakref.ref(e, lambda _r, k=id(e): self._validated.pop(k, None))
        except TypeError:  # not weak-referenceable (__slots__): validate again next time, it is cheap
            pass

    # ----------------------------------------------------------------- forward passes
    @property
    def remote(self):
        """False, True (NDIF) or "local" (nnsight's local simulation of remote execution)."""
        return getattr(self._impl, "remote", False)

    @property
    def attn_implementation(self) -> str | None:
        """The attention implementation forwards use (eager is switched on only for forwards that touch
        attn_pattern)."""
        return getattr(self.hf_model.config, "_attn_implementation", None)

    def _forward(self, req: ForwardRequest):
        with self._forward_lock, self._eager_if_pattern(req):
            return self._impl.forward(req)

    @contextlib.contextmanager
    def _eager_if_pattern(self, req: ForwardRequest):
        """SDPA (or the model's default) unless this forward captures or edits attn_pattern or attn_scores: then
        eager attention, the only implementation that materialises them, for this forward only."""
        impl = self.attn_implementation
        touches = any(has_key_axis(s) for s in (*req.capture, *req.edits))
        if not touches or impl in (None, "eager") or self.remote:
            yield
            return
        with self._attention.using("eager"):
            yield

    def _out(self, captures: dict) -> dict:
        if self.output_device is None:
            return captures
        return {k: v.to(self.output_device) for k, v in captures.items()}

    def run(self, inputs: Any, capture: Sequence[str] | str = (), edits: Sequence[Edit] | None = None,
            *, logits: bool = True, grad: bool = False, chat: bool | None = None,
            logits_last: int | None = None) -> RunOutput:
        """One forward over a (left-padded) batch; captures only the requested sites. `inputs` and `chat` as in
        `tokenize` (chat models read plain strings as user turns unless chat=False).

        logits_last=k unembeds only the last k positions (logits [b, k, vocab]; the batch is left-padded, so these
        are every row's last k tokens): on a small model the unembedding of every position is most of a forward.
        A capture or edit of the `logits` site needs them all and is refused with it.

        With logits=False the forward stops right after the deepest captured site. With grad=True the autograd
        graph is kept, so a loss on logits or captures back-propagates into edit parameters (e.g. a steering
        vector with requires_grad) and model weights."""
        batch = self.tokenize(inputs, chat=chat)
        sites = self._sites(capture)
        ctx = StepContext("prefill", -1, batch.position_ids, batch.lengths, batch.attention_mask.bool())
        if not logits and not sites:
            raise InputError("run(logits=False) needs at least one site in capture=[...]")
        edit_map = self._edits_by_site(edits, _has_padding(batch))
        if logits_last is not None:
            if int(logits_last) < 1:
                raise InputError(f"logits_last must be >= 1 (or None for every position), got {logits_last}")
            if any(s.kind == "logits" for s in [*sites, *edit_map]):
                raise InputError("logits_last cannot be combined with a capture or edit of the 'logits' site, which "
                                 "needs every position; drop one of the two")
        req = ForwardRequest(batch.input_ids, batch.attention_mask, batch.position_ids, ctx, sites, edit_map,
                             need_logits=logits, grad=grad, logits_to_keep=int(logits_last or 0))
        res = self._forward(req)
        return RunOutput(res.logits, Cache(self._out(res.captures), batch), batch, tokenizer=self.tokenizer)

    @torch.no_grad()
    def generate(self, inputs: Any, max_new_tokens: int = 16, edits: Sequence[Edit] | None = None,
                 capture: Sequence[str] | str = (), *, greedy: bool = True, temperature: float | None = None,
                 seed: int | None = None, stop_at_eos: bool = True, use_cache: bool = True,
                 return_logits: bool = True, chat: bool | None = None) -> GenerateOutput:
        """Generate with the KV cache (use_cache=False recomputes the whole sequence each step: the reference).
        `inputs` and `chat` as in `tokenize` (chat models read plain strings as user turns unless chat=False).

        Every edit sees an explicit StepContext; captures of the prompt forward go to `prefill_cache`, captures of
        each decode forward to `decode_cache[site]` as [b, n_steps, ...] (the state of the token fed at that step).
        Greedy by default; `temperature` applies only with greedy=False (set under greedy it raises, since it would
        change nothing)."""
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if greedy and temperature not in (None, 1.0):
            # a setting with no effect is refused, not ignored: under greedy decoding the argmax decides
            raise InputError(f"temperature={temperature} has no effect under greedy decoding (greedy=True is the "
                             "default); pass greedy=False to sample at that temperature")
        temperature = 1.0 if temperature is None else float(temperature)
        if not greedy and temperature <= 0:
            raise InputError("sampling needs temperature > 0 (or greedy=True)")
        batch = self.tokenize(inputs, chat=chat)
        b, T = batch.input_ids.shape
        if int(batch.lengths.max()) + max_new_tokens > self.n_ctx:
            raise InputError(f"prompt ({int(batch.lengths.max())} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                             f"the model's context of {self.n_ctx} tokens")
        sites = self._sites(capture)
        edit_map = self._edits_by_site(edits, _has_padding(batch))
        if self.remote:
            return self._generate_remote(batch, sites, edit_map, max_new_tokens, greedy=greedy,
                                         temperature=temperature, seed=seed, stop_at_eos=stop_at_eos,
                                         use_cache=use_cache, return_logits=return_logits)
        gen = torch.Generator(device="cpu")
        if seed is not None:
            gen.manual_seed(seed)

        def pick(step_logits: torch.Tensor) -> torch.Tensor:
            if greedy:
                return step_logits.argmax(-1)
            probs = torch.softmax(step_logits.float() / temperature, -1).cpu()
            return torch.multinomial(probs, 1, generator=gen).squeeze(-1).to(step_logits.device)

        ids, mask, pos = batch.input_ids, batch.attention_mask, batch.position_ids
        plen = batch.lengths
        active = torch.ones(b, dtype=torch.bool, device=ids.device)
        ctx = StepContext("prefill", -1, pos, plen, mask.bool())
        # The prefill needs the last position's logits only; the unembedding of every prompt position is most of a
        # small model's prefill (vocab 49k-262k against d_model 576-640). A capture or edit of `logits` keeps them all.
        last_only = not any(s.kind == "logits" for s in [*sites, *edit_map])
        res = self._forward(ForwardRequest(ids, mask, pos, ctx, sites, edit_map, use_cache=use_cache,
                                           logits_to_keep=1 if last_only else 0))
        prefill_cache = Cache(self._out(res.captures), batch)
        kv = res.kv
        last_logits = res.logits[:, -1]
        new_cols, logit_steps, actives = [], [], []
        step_caps: dict[str, list[torch.Tensor]] = {s.name: [] for s in sites}
        for step in range(max_new_tokens):
            nxt = pick(last_logits)
            nxt = torch.where(active, nxt, torch.full_like(nxt, self.pad_token_id))
            new_cols.append(nxt)
            if return_logits:
                logit_steps.append(last_logits)
            if stop_at_eos and self.stop_token_ids.numel():
                active = active & ~torch.isin(nxt, self.stop_token_ids.to(nxt.device))
            if step == max_new_tokens - 1 or not bool(active.any()):
                break
            # Feed the new token: positions continue each row's real-token count.
            mask = torch.cat([mask, torch.ones(b, 1, dtype=mask.dtype, device=mask.device)], 1)
            ids = torch.cat([ids, nxt[:, None]], 1)
            new_pos = (plen + step)[:, None]
            actives.append(active)
            if use_cache:
                ctx = StepContext("decode", step, new_pos, plen, active[:, None])
                req = ForwardRequest(nxt[:, None], mask, new_pos, ctx, sites, edit_map, kv=kv, use_cache=True)
                res = self._forward(req)
                kv = res.kv
                last_logits = res.logits[:, -1]
                for s in sites:
                    step_caps[s.name].append(res.captures[s.name])
            else:
                full_pos = torch.cat([pos, plen[:, None] + torch.arange(step + 1, device=ids.device)[None]], 1)
                real = torch.cat([batch.attention_mask.bool(),
                                  torch.stack(actives, 1) if actives else torch.ones(b, 0, dtype=torch.bool,
                                                                                    device=ids.device)], 1)
                # Rows that finished keep their earlier generated tokens "real" only while they were generating.
                ctx = StepContext("decode", step, full_pos, plen, real)
                res = self._forward(ForwardRequest(ids, mask, full_pos, ctx, sites, edit_map))
                last_logits = res.logits[:, -1]
                for s in sites:
                    step_caps[s.name].append(_last_col(res.captures[s.name], s))
        return self._finish(batch, torch.stack(new_cols, 1), logit_steps, actives, prefill_cache, step_caps,
                            stop_at_eos)

    def _finish(self, batch, new, logit_steps, actives, prefill_cache, step_caps, stop_at_eos) -> GenerateOutput:
        b = batch.input_ids.shape[0]
        tokens = torch.cat([batch.input_ids, new.to(batch.input_ids.device)], 1)
        new_lists = []
        stop = set(self.stop_token_ids.tolist())
        for i in range(b):
            row = []
            for t in new[i].tolist():
                row.append(t)
                if stop_at_eos and t in stop:
                    break
            new_lists.append(row)
        text = [self.tokenizer.decode([t for t in r if t not in stop], skip_special_tokens=False).strip()
                for r in new_lists]
        # attn_pattern / attn_scores keys grow every step, so their decode captures stay a list of [b, h, 1, k_t]
        step_caps = {k: [self._out({k: x})[k] for x in v] for k, v in step_caps.items()}
        decode_cache = {k: (v if has_key_axis(k) else torch.cat(v, 1)) if v else torch.zeros(0)
                        for k, v in step_caps.items()}
        decode_active = torch.stack(actives, 1) if actives else torch.zeros(b, 0, dtype=torch.bool)
        return GenerateOutput(tokens=tokens, new_tokens=new_lists, text=text, batch=batch,
                              prefill_cache=prefill_cache, decode_cache=decode_cache, decode_active=decode_active,
                              step_logits=torch.stack(logit_steps, 1) if logit_steps else None,
                              tokenizer=self.tokenizer)

    def _generate_remote(self, batch, sites, edit_map, max_new_tokens, *, greedy, temperature, seed, stop_at_eos,
                         use_cache, return_logits) -> GenerateOutput:
        """The KV-cached loop as one nnsight session: every decode step's edit closures are built here up front
        from its StepContext (positions are known in advance; rows are treated as generating until the end, so a
        row that already stopped may still be edited, which changes none of its kept tokens)."""
        if not use_cache:
            raise RemoteError("remote generation runs the KV-cached loop only; drop use_cache=False")
        ids, mask, pos, plen = batch.input_ids, batch.attention_mask, batch.position_ids, batch.lengths
        b = ids.shape[0]
        pre = ForwardRequest(ids, mask, pos, StepContext("prefill", -1, pos, plen, mask.bool()), sites, edit_map,
                             use_cache=True)
        steps = []
        for step in range(max_new_tokens - 1):
            new_pos = (plen + step)[:, None]
            ctx = StepContext("decode", step, new_pos, plen, torch.ones(b, 1, dtype=torch.bool, device=ids.device))
            width = ids.shape[1] + step + 1
            req = ForwardRequest(ids[:, :1], torch.ones(b, width, dtype=mask.dtype), new_pos, ctx, sites, edit_map,
                                 use_cache=True)
            steps.append((new_pos, self._impl.plan(req)))
        with self._forward_lock:
            pre_caps, new, logits, step_caps, actives = self._impl.generate_session(
                pre, steps, greedy=greedy, temperature=temperature, seed=seed, stop_ids=self.stop_token_ids,
                stop_at_eos=stop_at_eos, pad_id=self.pad_token_id)
        caps = {s.name: [c[s.name] for c in step_caps] for s in sites}
        logit_steps = list(logits.unbind(1)) if return_logits else []
        return self._finish(batch, new, logit_steps, list(actives), Cache(self._out(pre_caps), batch), caps,
                            stop_at_eos)


def trained_prompt_format(path: str | None) -> str | None:
    """How an interplab organism was trained, from its card (card.json, recipe.data.format): "chat", "raw", or
    "text" when the card records no format; a registry real model's "chat"/"text" from its cache manifest; None for
    any other checkpoint."""
    import json
    from pathlib import Path

    if path and (Path(path) / "interplab-gguf.json").is_file():   # a real model from the registry (models/real.py)
        try:
            return json.loads((Path(path) / "interplab-gguf.json").read_text()).get("prompts")
        except (OSError, ValueError, AttributeError):
            return None
    if not path or not (Path(path) / "card.json").is_file():
        return None
    try:
        card = json.loads((Path(path) / "card.json").read_text())
        return ((card.get("recipe") or {}).get("data") or {}).get("format") or "text"
    except (OSError, ValueError, AttributeError):
        return None


def template_notice(model) -> str:
    """What a plain string became on `model`: the template's text before and after one user turn."""
    mark = "\x00USER\x00"
    text = model.tokenizer.apply_chat_template([{"role": "user", "content": mark}], add_generation_prompt=True,
                                               tokenize=False)
    before, _, after = text.partition(mark)
    return (f"{model.name}: plain strings are user turns of its chat template (the default for a chat model). "
            f"Each prompt is rendered as {before!r} + your text + {after!r}; anything before the user turn (e.g. a "
            "default system prompt) changes activations. `out.prompts` shows every rendered prompt; pass "
            "chat=False for raw text, or a list of messages to set the turns yourself. (Shown once per model.)")


def unknown_token_message(model_name: str, unknown: list[str]) -> str:
    """One line naming the prompt pieces a tokenizer could not read (shared by the warning and the app notice)."""
    names = sorted(set(unknown))
    shown = ", ".join(repr(u) for u in names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    return (f"{len(unknown)} piece(s) of the prompt are unknown to {model_name}'s tokenizer and became its unknown "
            f"token: {shown}. Use words from its vocabulary (model.tokenizer.get_vocab()).")


def _stop_ids(tokenizer, hf_model) -> torch.Tensor:
    """EOS of the tokenizer plus every eos id of the generation config (chat models end turns with e.g. <|im_end|>)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(hf_model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        ids.update(int(i) for i in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
    return torch.tensor(sorted(ids), dtype=torch.long)


class _PadNaNGuard(Edit):
    """Zero non-finite values at left-padding positions of the residual stream.

    A padding query row sees no key, and eager attention in float64 turns it into NaN; through 0 * NaN in the next
    layer's pattern @ V that NaN would reach real tokens. Real positions are never touched."""

    def __call__(self, site, x, ctx):
        pad = ~ctx.to(x.device).real
        if not bool(pad.any()):
            return x
        return torch.where(pad[..., None] & ~torch.isfinite(x), torch.zeros((), dtype=x.dtype, device=x.device), x)

    def remote_apply(self, site, ctx):
        pad = (~ctx.real).cpu()

        def guard(x):
            p = pad.to(x.device)[..., None]
            return torch.where(p & ~torch.isfinite(x), torch.zeros((), dtype=x.dtype, device=x.device), x)
        return guard

    def __repr__(self):
        return "_PadNaNGuard()"


_PAD_GUARD = _PadNaNGuard()


def _has_padding(batch: Batch) -> bool:
    return not bool(batch.attention_mask.all())


def _last_col(x: torch.Tensor, site: Site) -> torch.Tensor:
    """The newest position of a full-sequence capture, shaped like a cached decode capture."""
    if has_key_axis(site):
        return x[:, :, -1:]
    return x[:, -1:]
