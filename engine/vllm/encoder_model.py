"""The multimodal model a scheduler with encoder inputs is built from, offline: a config-only PaliGemma.

vLLM's ``Scheduler.__init__`` builds its ``EncoderCacheManager`` only for a model that
supports multimodal inputs, sizing the cache and the per-step encoder compute budget
from the model's multimodal processor (``MultiModalBudget``,
vllm/multimodal/encoder_budget.py; ``compute_mm_encoder_budget``,
vllm/v1/core/encoder_cache_manager.py).  PaliGemma's processor needs a tokenizer from
a hub, so ``stand_in_processor`` replaces its processor factories, while a scheduler
is built, with ones that need none and report a chosen number of tokens per image.
Only the processor is ours; the scheduler, its cache manager and the budget
arithmetic are vLLM's.  In the scheduler target no encoder runs (the driver fabricates model
outputs); in the engine target the V1 runner runs its encoder path over the stand-in encoder
(``oracle_encoder.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from asyncspec.engine.vllm.vllm_environment import config_only_dir, load_vllm

NUM_IMAGE_TOKENS = 16  # feature_attempts' tokens per image (its encoder cache size too)
MAX_MODEL_LEN = 4096  # the tiny PaliGemma's max_position_embeddings

TINY_PALIGEMMA_CONFIG: dict[str, Any] = {
    "architectures": ["PaliGemmaForConditionalGeneration"],
    "model_type": "paligemma",
    "image_token_index": 999,
    "projection_dim": 64,
    "hidden_size": 64,
    "text_config": {"model_type": "gemma", "hidden_size": 64, "intermediate_size": 128,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
                    "head_dim": 16, "vocab_size": 1000, "max_position_embeddings": MAX_MODEL_LEN},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                      "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 32,
                      "patch_size": 8, "projection_dim": 64, "num_image_tokens": NUM_IMAGE_TOKENS},
    "torch_dtype": "float32",
}
"""A config-only PaliGemma: a multimodal architecture whose vLLM module imports on this
host (Llava's needs ``mistral_common``, Qwen2-VL's and Gemma 3's need ``torchvision``)."""


def paligemma_dir(name: str = "tiny-paligemma", config: dict[str, Any] | None = None) -> str:
    """A scratch folder holding only the tiny PaliGemma's ``config.json`` (written atomically, reused)."""
    return config_only_dir(name, config or TINY_PALIGEMMA_CONFIG)


@contextlib.contextmanager
def stand_in_processor(num_image_tokens: int = NUM_IMAGE_TOKENS) -> Iterator[None]:
    """PaliGemma's multimodal processor factories replaced, while a scheduler is built, by ones
    that need no tokenizer and report ``num_image_tokens`` per image
    (``MultiModalRegistry.create_processor``, vllm/multimodal/registry.py)."""
    load_vllm()  # the CPU / offline environment before any vLLM import
    from vllm.model_executor.models import paligemma
    from vllm.multimodal.registry import _ProcessorFactories

    def max_tokens(self: Any, seq_len: int, mm_counts: Any) -> dict[str, int]:
        return {"image": num_image_tokens}

    info: Any = type("StandInPaliGemmaInfo", (paligemma.PaliGemmaProcessingInfo,),
                     {"get_mm_max_tokens_per_item": max_tokens})
    processor: Any = type("StandInPaliGemmaProcessor", (paligemma.PaliGemmaMultiModalProcessor,),
                          {"requires_tokenizer": False})
    model_cls: Any = paligemma.PaliGemmaForConditionalGeneration
    old = model_cls.__dict__.get("_processor_factory")
    model_cls._processor_factory = _ProcessorFactories(
        info=info, processor=processor, dummy_inputs=paligemma.PaliGemmaDummyInputsBuilder)
    try:
        yield
    finally:
        model_cls._processor_factory = old


def image(identifier: str, offset: int, length: int = NUM_IMAGE_TOKENS, data: Any = None) -> Any:
    """One image's ``MultiModalFeatureSpec`` (vllm/multimodal/inputs.py): prompt positions
    ``[offset, offset + length)``; ``data`` None as when the processor cache holds it (the scheduler
    target's), else its ``MultiModalKwargsItem`` (the engine target's: ``oracle_encoder.image_data``)."""
    load_vllm()  # the CPU / offline environment before any vLLM import
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange

    return MultiModalFeatureSpec(data=data, modality="image", identifier=identifier,
                                 mm_position=PlaceholderRange(offset=offset, length=length))


def item_id(item: int) -> str:
    """The identifier (mm hash) of spec item ``item``."""
    return f"img{item}"


def item_of(identifier: str) -> int:
    """Spec item of an identifier ``item_id`` made."""
    return int(identifier[3:])
