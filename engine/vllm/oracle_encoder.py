"""The oracle model with a stand-in encoder: what the V1 runner's multimodal path calls for images.

For a multimodal model (the tiny PaliGemma, ``encoder_model.py``) vLLM's
``GPUModelRunner._preprocess`` runs the encoder for the step's
``scheduled_encoder_inputs`` (``_execute_mm_encoder``: each item's
``MultiModalKwargsItem`` batched by ``group_and_batch_mm_kwargs``, then
``embed_multimodal``, the outputs kept in the runner's ``encoder_cache`` by
identifier), gathers the embeddings of the image positions the step feeds
from that cache (``_gather_mm_embeddings``: an entry missing there raises
"Encoder cache miss"), merges them into the token embeddings
(``SupportsMultiModal.embed_input_ids``, vLLM's own, through
``_merge_multimodal_embeddings``) and calls the model with ``inputs_embeds``
only.  This module replaces the encoder's forward pass and the text embedding
table, nothing else:

* an image's data is ``pixel_values = [item, length]`` (``image_data``);
* ``embed_multimodal`` returns, per item, ``length`` rows whose first column
  is ``oracle_model.image_token(item, j)``: row ``j`` names its item and its
  index in the image;
* the text embedding of a token id is a row whose first column is the id;
* ``forward`` reads the first column of ``inputs_embeds`` as what was fed at
  each position and applies the oracle model (``fake_model.py``) to it.

So an image embedding that reaches the wrong request, the wrong position or
the wrong step, a stale or evicted encoder output, or a token id left where
an embedding belongs changes the hidden hash and the sampled tokens: the
expected stream is the oracle's over ``oracle_model.embedded_prompt``.  Each
forward also records which items the encoder computed and which it read
(``encoded``, ``read``): an item read but not computed in the same forward
came from the runner's encoder cache (the worker category
``encoder_output_reused``).
"""
from __future__ import annotations

import functools
from typing import Any, cast

from asyncspec.engine.vllm import oracle_model as om
from asyncspec.engine.vllm.fake_model import oracle_module_class
from asyncspec.engine.vllm.vllm_environment import load_vllm

PIXEL_VALUES = "pixel_values"
"""The one keyword the stand-in encoder takes (PaliGemma's image input is named so)."""


def image_data(item: int, length: int) -> Any:
    """One image's ``MultiModalKwargsItem`` (vllm/multimodal/inputs.py): ``pixel_values`` ``[item, length]``,
    a batched field, as a processor's output would be; what ``_execute_mm_encoder`` batches."""
    torch = load_vllm().torch
    from vllm.multimodal.inputs import MultiModalBatchedField, MultiModalFieldElem, MultiModalKwargsItem

    elem = MultiModalFieldElem(data=torch.tensor([item, length], dtype=torch.int64), field=MultiModalBatchedField())
    return MultiModalKwargsItem({PIXEL_VALUES: elem})


@functools.cache
def oracle_encoder_module_class() -> type:
    """``OracleEncoderModule``: the oracle model as a ``SupportsMultiModal`` model (built lazily)."""
    torch = load_vllm().torch
    from vllm.model_executor.models.interfaces import SupportsMultiModal

    class TextEmbedding(torch.nn.Module):  # type: ignore[misc, name-defined]
        """The language model's embedding table: a token id's row carries the id in its first column."""

        def __init__(self, width: int) -> None:
            super().__init__()
            self.width = width

        def embed_input_ids(self, input_ids: Any) -> Any:
            rows = torch.zeros((input_ids.shape[0], self.width), dtype=torch.float32, device=input_ids.device)
            rows[:, 0] = input_ids.to(torch.float32)
            return rows

    class OracleEncoderModule(oracle_module_class(), SupportsMultiModal):  # type: ignore[misc]
        requires_raw_input_tokens = False  # the runner passes inputs_embeds only, as to PaliGemma

        def __init__(self, vocab_size: int, width: int) -> None:
            super().__init__(vocab_size)
            self.language_model = TextEmbedding(width)
            self.encoded: list[tuple[int, ...]] = []  # per forward: the items the encoder computed
            self.read: list[tuple[int, ...]] = []  # per forward: the items whose embeddings were fed
            self._encoding: list[int] = []

        def get_language_model(self) -> Any:
            return self.language_model

        def embed_multimodal(self, **kwargs: Any) -> list[Any]:
            """The stand-in encoder's forward pass: per item ``[item, length]``, ``length`` rows of
            ``image_token(item, j)``."""
            out = []
            for item, length in kwargs[PIXEL_VALUES].tolist():
                rows = torch.zeros((length, self.language_model.width), dtype=torch.float32)
                rows[:, 0] = torch.tensor([om.image_token(item, j) for j in range(length)], dtype=torch.float32)
                out.append(rows)
                self._encoding.append(int(item))
            return out

        def forward(self, input_ids: Any = None, positions: Any = None, intermediate_tensors: Any = None,
                    inputs_embeds: Any = None, **kwargs: Any) -> Any:
            fed = inputs_embeds[:, 0].round().to(torch.int64).cpu().numpy()
            images = fed[fed >= om.IMAGE_BASE]
            self.read.append(tuple(sorted({int(v - om.IMAGE_BASE) // om.IMAGE_STRIDE for v in images})))
            self.encoded.append(tuple(sorted(set(self._encoding))))
            self._encoding = []
            hidden = self._hidden(fed, positions.cpu().numpy())
            return torch.from_numpy(hidden).to(positions.device)

        def reset(self) -> None:
            super().reset()
            self.encoded, self.read, self._encoding = [], [], []

    return cast(type, OracleEncoderModule)
