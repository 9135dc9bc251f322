"""What model a capture ran, read from its kernels and their shapes — never guessed.

Every field names the kernel, the shapes and the source row it was read from, with a confidence;
a field the kernels do not show stays unknown. Per-rank shards (tensor-parallel heads, FFN width,
vocabulary; expert-parallel experts) are scaled by the parallel sizes the capture records, and say so.
"""

from __future__ import annotations

import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.stages.model.fingerprint_fields import (
    ATTENTION_FEATURES,
    Field,
    Parallel,
    capped,
    evidence_of,
    of_field,
    of_kernels,
    prepare,
    scaled,
    weighted_mode,
)
from npuprof.pipeline.stages.model.flops import matmul_dims


class Fingerprint:
    """Infers config fields from prepared shape ops (see ``prepare``)."""

    def __init__(self, ops: pd.DataFrame, parallel: Parallel, layers: dict):
        self.ops = ops
        self.parallel = parallel
        self.layers = layers
        self.fields: dict[str, Field] = {}
        self.features: dict[str, dict] = {}
        self.transformer: dict = {"present": False, "method": "no shape ops", "evidence": []}

    # -- fields -------------------------------------------------------------------------------------
    def hidden_size(self) -> None:
        pairs = []
        for _, row in of_field(self.ops, "norm").iterrows():
            ins = [s for s in row["ins"] if s is not None]
            if len(ins) >= 2 and len(ins[-1]) == 1 and ins[0][-1] == ins[-1][0]:
                pairs.append((ins[-1][0], int(row["call_count"]), row))
        if not pairs:
            return
        # the residual-stream norm is the widest; per-head (QK) and low-rank (MLA) norms are narrower
        hidden = max(value for value, _, _ in pairs)
        rows = [row for value, _, row in pairs if value == hidden]
        confirmed = self._embedding_width() == hidden
        self.fields["hidden_size"] = Field(
            hidden,
            "high" if confirmed else "medium",
            "widest RMS/LayerNorm weight over its input's last dim" + (" (= the embedding width)" if confirmed else ""),
            [evidence_of(r) for r in rows[:2]],
        )

    def _embedding_width(self) -> int | None:
        for _, row in of_field(self.ops, "embedding").iterrows():
            table = row["ins"][0] if row["ins"] else None
            if table is not None and len(table) == 2 and row["type"] != "EmbeddingDenseGradV2":
                return table[1]
        return None

    def _per_head(self) -> list[tuple[int, int, pd.Series]]:
        """(heads, head_dim, row) of per-head tensors: RoPE inputs and per-head (QK) norms."""
        head_dims = set(knowledge.load("model_shapes")["head_dims"])
        found = []
        for _, row in of_field(self.ops, "rope").iterrows():
            first = row["ins"][0] if row["ins"] else None
            if first is not None and len(first) >= 3 and first[-1] in head_dims:
                found.append((first[-2], first[-1], row))
        for _, row in self._qk_norms().iterrows():
            first = row["ins"][0]
            found.append((first[-2], first[-1], row))
        return found

    def _qk_norms(self) -> pd.DataFrame:
        head_dims = set(knowledge.load("model_shapes")["head_dims"])

        def per_head(ins: list) -> bool:
            present = [s for s in ins if s is not None]
            return (
                len(present) >= 2
                and len(present[0]) >= 3
                and len(present[-1]) == 1
                and present[-1][0] == present[0][-1]
                and present[0][-1] in head_dims
            )

        norms = of_field(self.ops, "norm")
        return norms[norms["ins"].map(per_head)]

    def attention(self) -> None:
        if self.features.get("mla", {}).get("present"):
            self._mla_attention()
            return
        per_head = self._per_head()
        scores = self._score_widths()
        if not per_head and not scores:
            return
        tp = self.parallel.tp
        if per_head:
            head_dim, rows = weighted_mode([(d, int(r["call_count"]), r) for _, d, r in per_head])
            self.fields["head_dim"] = Field(
                head_dim,
                "high",
                "last dim of per-head tensors (RoPE inputs, QK-norm inputs)",
                [evidence_of(r) for r in rows[:2]],
            )
        else:
            return  # head_dim unknown: a fused q/k width cannot be split into heads
        widths = {}
        evidence = {}
        if scores:
            q_width, k_width, row = scores[0]
            if q_width % head_dim == 0 and k_width % head_dim == 0:
                widths = {"q": q_width // head_dim, "kv": k_width // head_dim}
                evidence = {"q": [row], "kv": [row]}
        head_counts = sorted({n for n, d, _ in per_head if d == head_dim})
        if not widths and head_counts:
            widths = {"q": head_counts[-1], "kv": head_counts[0] if len(head_counts) > 1 else None}
            evidence = {
                "q": [r for n, d, r in per_head if n == head_counts[-1]][:1],
                "kv": [r for n, d, r in per_head if n == head_counts[0]][:1] if len(head_counts) > 1 else [],
            }
        method = "attention score q / k widths ÷ head_dim" if scores else "heads of per-head tensors"
        agrees = set(head_counts) <= {widths.get("q"), widths.get("kv")}
        for key, name in (("q", "num_attention_heads"), ("kv", "num_key_value_heads")):
            local = widths.get(key)
            if local is None:
                continue
            value, cap, note = scaled(local, tp, "heads", "TP")
            if key == "kv" and local == 1 and tp and tp > 1:
                cap, note = "low", f"one KV head per rank: KV heads may be replicated over the TP {tp} ranks (≤ {tp})"
            confidence = capped("high" if agrees else "medium", cap)
            self.fields[name] = Field(value, confidence, method, [evidence_of(r) for r in evidence[key]], note)

    def _score_widths(self) -> list[tuple[int, int, pd.Series]]:
        """(q width, k width, row) of flash-attention calls: N·D of a TND [T, N, D] tensor, else its last
        dim ([T|B,S|S,B, N·D], and a paged KV cache's [blocks, block size, N·D])."""
        head_dims = set(knowledge.load("model_shapes")["head_dims"])

        def width(shape: tuple[int, ...]) -> int:
            tnd = len(shape) == 3 and shape[-1] in head_dims and shape[-2] <= 256
            return shape[-2] * shape[-1] if tnd else shape[-1]

        found = []
        for _, row in of_field(self.ops, "attention_score").iterrows():
            q, k = (row["ins"] + [None, None])[:2]
            if q is None or k is None or len(q) != len(k) or len(q) not in (2, 3):
                continue
            found.append((width(q), width(k), row))
        return found

    def _mla_attention(self) -> None:
        scores = of_field(self.ops, "attention_score")
        for _, row in scores.iterrows():
            q = row["ins"][0] if row["ins"] else None
            out = row["outs"][-1] if row["outs"] else None
            if q is None or out is None or len(q) != 3 or len(out) != 3:
                continue
            heads, qk_dim, v_dim = q[1], q[2], out[2]
            value, cap, note = scaled(heads, self.parallel.tp, "heads", "TP")
            evidence = [evidence_of(row)]
            method = "MLA: attention query [T, N, qk_head_dim] and output [T, N, v_head_dim]"
            self.fields["num_attention_heads"] = Field(value, capped("high", cap), method, evidence, note)
            self.fields["num_key_value_heads"] = Field(
                value,
                capped("high", cap),
                method,
                evidence,
                "MLA keeps one shared latent KV; its configs list num_key_value_heads = num_attention_heads",
            )
            self.fields["head_dim"] = Field(
                v_dim, "high", "MLA: value head dim (attention output's last dim)", evidence
            )
            self.fields["qk_head_dim"] = Field(qk_dim, "high", "MLA: query head dim (nope + rope)", evidence)
            ins = [s for s in row["ins"] if s is not None]
            if len(ins) >= 3 and len(ins[1]) == 3 and len(ins[2]) == 3 and ins[1][-1] > ins[2][-1]:
                self.fields["kv_lora_rank"] = Field(ins[2][-1], "medium", "MLA: latent value width", evidence)
                self.fields["qk_rope_head_dim"] = Field(
                    ins[1][-1] - ins[2][-1], "medium", "MLA: latent key width − latent value width", evidence
                )
            return

    def intermediate(self) -> None:
        by_block: dict[str, list] = {}
        for _, row in of_field(self.ops, "activation").iterrows():
            out = row["outs"][0] if row["outs"] else None
            if out is None:
                continue
            block = row["block_kind"] if isinstance(row["block_kind"], str) else "unknown"
            by_block.setdefault(block, []).append((out[-1], int(row["call_count"]), row))
        moe_present = self.features.get("moe", {}).get("present")
        dense = by_block.get("ffn") or (by_block.get("unknown") if not moe_present else None)
        if dense:
            width, rows = weighted_mode(dense)
            value, cap, note = scaled(width, self.parallel.tp, "FFN width", "TP")
            self.fields["intermediate_size"] = Field(
                value,
                capped("high", cap),
                "gated activation (SwiGlu) output width in dense FFN blocks",
                [evidence_of(r) for r in rows[:2]],
                note,
            )
        in_moe = by_block.get("moe") or []
        routed_tokens = self._routed_token_counts()
        routed = [p for p in in_moe if not routed_tokens or p[2]["outs"][0][0] in routed_tokens]
        shared = [p for p in in_moe if routed_tokens and p[2]["outs"][0][0] not in routed_tokens]
        if routed:
            width, rows = weighted_mode(routed)
            self.fields["moe_intermediate_size"] = Field(
                width,
                "high",
                "gated activation output width in MoE blocks (one expert)",
                [evidence_of(r) for r in rows[:2]],
            )
            self._shared_experts(width, shared)

    def _routed_token_counts(self) -> set[int]:
        """Token counts the grouped matmuls run on (routed tokens, not the layer's own tokens)."""
        counts = set()
        for _, row in self._grouped_matmuls().iterrows():
            x = row["ins"][0] if row["ins"] else None
            if x is not None and len(x) == 2:
                counts.add(x[0])
        return counts

    def _shared_experts(self, expert_width: int, shared: list) -> None:
        """Shared experts: a gated FFN in the MoE block over the layer's own tokens, k experts wide."""
        if not shared:
            self.fields["n_shared_experts"] = Field(
                0, "medium", "no gated FFN over the layer's own tokens in the MoE blocks (routed tokens only)"
            )
            return
        width, rows = weighted_mode(shared)
        local, cap, note = scaled(width, self.parallel.tp, "shared expert width", "TP")
        if local % expert_width:
            self.fields["n_shared_experts"] = Field(
                None,
                "none",
                "shared FFN width is not a multiple of the expert width",
                [evidence_of(rows[0])],
                f"shared width {local}, expert width {expert_width}",
            )
            return
        self.fields["n_shared_experts"] = Field(
            local // expert_width,
            capped("high", cap),
            "gated FFN over the layer's own tokens in MoE blocks ÷ expert width",
            [evidence_of(r) for r in rows[:2]],
            note,
        )

    def experts(self) -> None:
        if not self.features.get("moe", {}).get("present"):
            return
        for _, row in of_field(self.ops, "gating_topk").iterrows():
            scores = row["ins"][0] if row["ins"] else None
            chosen = row["outs"][0] if row["outs"] else None
            if scores is None or chosen is None or len(scores) != 2 or len(chosen) != 2:
                continue
            if row["type"] in ("TopK", "TopKV2") and row["block_kind"] != "moe":
                continue
            evidence = [evidence_of(row)]
            confirmed = self._local_experts()
            note = ""
            confidence = "high"
            if confirmed is not None:
                local, ep_row = confirmed
                ep = self.parallel.ep
                if ep and local * ep != scores[1]:
                    note = f"grouped matmul holds {local} experts × EP {ep} = {local * ep}, not {scores[1]}"
                    confidence = "medium"
                evidence.append(evidence_of(ep_row))
            self.fields["n_routed_experts"] = Field(
                scores[1], confidence, "router scores width (gating top-k input)", evidence, note
            )
            self.fields["num_experts_per_tok"] = Field(
                chosen[1], "high", "gating top-k output width", [evidence_of(row)]
            )
            break
        else:
            found = self._local_experts()
            if found is not None:
                local, row = found
                value, cap, note = scaled(local, self.parallel.ep, "experts", "EP")
                self.fields["n_routed_experts"] = Field(
                    value, cap, "grouped matmul weight's expert dim", [evidence_of(row)], note
                )
        if "moe_intermediate_size" not in self.fields:
            self._moe_width_from_grouped_matmul()

    def _local_experts(self) -> tuple[int, pd.Series] | None:
        for _, row in self._grouped_matmuls().iterrows():
            weight = row["ins"][1] if len(row["ins"]) > 1 else None
            if weight is not None and len(weight) == 3:
                return weight[0], row
        return None

    def _grouped_matmuls(self) -> pd.DataFrame:
        return of_field(self.ops, "grouped_matmul")

    def _moe_width_from_grouped_matmul(self) -> None:
        hidden = self.fields.get("hidden_size", Field()).value
        for _, row in self._grouped_matmuls().iterrows():
            x = row["ins"][0] if row["ins"] else None
            out = row["outs"][0] if row["outs"] else None
            if x is not None and out is not None and len(x) == 2 and out[-1] == hidden and x[-1] != hidden:
                self.fields["moe_intermediate_size"] = Field(
                    x[-1],
                    "medium",
                    "input width of the grouped matmul that returns to the hidden size (down proj)",
                    [evidence_of(row)],
                )
                return

    def vocab(self) -> None:
        hidden = self.fields.get("hidden_size", Field()).value
        if not hidden:
            return
        ratio = knowledge.load("model_shapes")["lm_head_min_ratio"]
        outside = self.ops[(self.ops["layer_call_count"] == 0) & (self.ops["op_type"] == "aic")]
        for _, row in outside.iterrows():
            if len(row["ins"]) < 2 or not row["outs"] or None in (row["ins"][0], row["ins"][1], row["outs"][0]):
                continue
            dims = matmul_dims(row["ins"][0], row["ins"][1], row["outs"][0])
            if dims is None or dims[3] != hidden or dims[2] < ratio * hidden:
                continue
            shard = dims[2]
            self.fields["vocab_size_or_lm_head_shard"] = Field(
                shard,
                "high",
                "LM head matmul output width (hidden → vocabulary, outside decoder layers)",
                [evidence_of(row)],
            )
            value, cap, note = scaled(shard, self.parallel.tp, "LM head columns", "TP")
            if self.parallel.tp and self.parallel.tp > 1:
                note += " (assumes a vocabulary-parallel LM head)"
            self.fields["vocab_size"] = Field(value, cap, "LM head output width", [evidence_of(row)], note)
            return

    def layer_count(self) -> None:
        totals = self.layers.get("observed_total_layers") or []
        per_rank = self.layers.get("observed_layers_per_rank") or {}
        if len(totals) != 1:
            if totals:
                self.fields["num_hidden_layers"] = Field(
                    None,
                    "none",
                    "segment's layers per pass × pipeline stages",
                    note=f"ranks disagree: {totals}",
                )
            return
        stages = self.layers.get("pipeline_stages") or 1
        known_pp = self.parallel.pp is not None
        confidence = "high" if known_pp or stages == 1 and not self._pipeline_p2p() else "low"
        note = "" if confidence == "high" else "pipeline stages unknown but send/recv seen: this may be one stage"
        self.fields["num_hidden_layers"] = Field(
            totals[0],
            confidence,
            f"segment's decoder layers per pass ({sorted(set(per_rank.values()))}) "
            + (
                f"× {stages} pipeline stage(s)"
                if len(set(per_rank.values())) <= 1
                else f"summed over {stages} pipeline stages"
            ),
            [{"segment_manifest": "layer_validation", "observed_layers_per_rank": per_rank}],
            note,
        )

    def _pipeline_p2p(self) -> bool:
        return bool(self.ops["type"].astype(str).str.contains("batchSendRecv|send|receive", case=False).any())

    # -- features -----------------------------------------------------------------------------------
    def detect_features(self) -> None:
        markers = knowledge.load("model_shapes")["features"]
        for feature in markers:
            hits = of_kernels(self.ops, "features", feature)
            self.features[feature] = {
                "present": bool(len(hits)),
                "confidence": "high" if len(hits) else "medium",
                "evidence": [evidence_of(r) for _, r in hits.head(2).iterrows()],
                "call_count": int(hits["call_count"].sum()) if len(hits) else 0,
                "method": "a marker kernel runs" if len(hits) else "no marker kernel in the capture",
            }

    def derived_features(self) -> None:
        qk = self._qk_norms()
        self.features["qk_norm"] = {
            "present": bool(len(qk)),
            "confidence": "high" if len(qk) else "medium",
            "evidence": [evidence_of(r) for _, r in qk.head(2).iterrows()],
            "call_count": int(qk["call_count"].sum()) if len(qk) else 0,
            "method": "RMS norm over per-head tensors [.., heads, head_dim]" if len(qk) else "no per-head norm",
        }
        heads = self.fields.get("num_attention_heads", Field()).value
        kv = self.fields.get("num_key_value_heads", Field()).value
        mla = self.features.get("mla", {}).get("present")
        kind = None
        if mla:
            kind = "mla"
        elif heads and kv:
            kind = "mqa" if kv == 1 else "mha" if kv == heads else "gqa"
        for name in ("gqa", "mha", "mqa"):
            source = self.fields.get("num_key_value_heads")
            self.features[name] = {
                "present": None if kind is None else kind == name,
                "confidence": source.confidence if source and kind else "none",
                "evidence": source.evidence if source and kind == name else [],
                "call_count": 0,
                "method": "query heads vs KV heads" if kind else "heads unknown",
            }
        moe = self.features.get("moe", {}).get("present")
        transformer = self.transformer["present"]
        self.features["dense"] = {
            "present": not moe if transformer else None,  # dense vs MoE is a transformer's property
            "confidence": "medium" if transformer else "none",
            "evidence": [],
            "call_count": 0,
            "method": ("no MoE kernel runs" if not moe else "MoE kernels run")
            if transformer
            else "no attention or decoder-layer evidence",
        }

    def transformer_evidence(self) -> None:
        """Is this a transformer at all? Attention kernels, an attention-family feature or decoder
        layers segment found. Without any, no model is named and no transformer feature claimed."""
        scores = of_field(self.ops, "attention_score") if len(self.ops) else self.ops
        families = [f for f in ATTENTION_FEATURES if self.features.get(f, {}).get("present")]
        layers = [n for n in self.layers.get("observed_total_layers") or [] if n]
        found = []
        if len(scores):
            found.append(f"attention kernels run ({', '.join(sorted(set(scores['type'])))})")
        if families:
            found.append(f"attention-family kernels run ({', '.join(families)})")
        if layers:
            found.append(f"segment found decoder layers ({', '.join(str(n) for n in layers)})")
        self.transformer = {
            "present": bool(found),
            "method": "; ".join(found) or "no attention kernel, no attention-family kernel, no decoder layer",
            "evidence": [evidence_of(r) for _, r in scores.head(2).iterrows()] if len(scores) else [],
        }

    def run(self) -> Fingerprint:
        self.detect_features()
        self.transformer_evidence()
        self.hidden_size()
        self.attention()
        self.intermediate()
        self.experts()
        self.vocab()
        self.layer_count()
        self.derived_features()
        return self


def infer(ops: pd.DataFrame, parallel: Parallel, layers: dict) -> Fingerprint:
    """The fingerprint of a capture from its shape ops (all ranks), parallel sizes and segment's layers."""
    if len(ops):
        return Fingerprint(prepare(ops), parallel, layers).run()
    empty = Fingerprint(ops, parallel, layers)
    empty.transformer_evidence()  # decoder layers can show without shapes
    return empty
