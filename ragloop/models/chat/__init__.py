"""Chat models: one async interface, backends by `"provider:name"`, composable wrappers.

    from ragloop.models.chat import ChatRequest, make_chat_model, run_sync
    model = make_chat_model("local:smollm2-135m")
    resp = run_sync(model.request(ChatRequest.user("Say hi", max_tokens=8)))

Modules are private in spirit; these names are the public API (checked by a test).
"""

from ragloop.models.chat.base import (
    ChatModel,
    ChatRequest,
    ChatResponse,
    Message,
    TokenLogprob,
    TopLogprob,
    Usage,
    estimate_tokens,
    run_sync,
)
from ragloop.models.chat.cache import Cached
from ragloop.models.chat.calllog import (
    DEFAULT_PRICES,
    CallPurpose,
    CallRecord,
    CallScope,
    CallSink,
    Logged,
    MemorySink,
    Price,
    PriceTable,
    call_scope,
    current_scope,
)
from ragloop.models.chat.db import ChatCacheDB
from ragloop.models.chat.registry import (
    ModelInfo,
    list_models,
    make_chat_model,
    make_wrapped,
    providers,
    register_provider,
    wrap,
)
from ragloop.models.chat.structured import reset_structured_stats, structured_stats
from ragloop.models.chat.testing import FunctionModel, TestModel, block_real_calls, real_calls
from ragloop.models.chat.wrappers import RateLimited, Retrying, WrapperModel

__all__ = [
    "DEFAULT_PRICES",
    "Cached",
    "CallPurpose",
    "CallRecord",
    "CallScope",
    "CallSink",
    "ChatCacheDB",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "FunctionModel",
    "Logged",
    "MemorySink",
    "Message",
    "ModelInfo",
    "Price",
    "PriceTable",
    "RateLimited",
    "Retrying",
    "TestModel",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
    "WrapperModel",
    "block_real_calls",
    "call_scope",
    "current_scope",
    "estimate_tokens",
    "list_models",
    "make_chat_model",
    "make_wrapped",
    "providers",
    "real_calls",
    "register_provider",
    "reset_structured_stats",
    "run_sync",
    "structured_stats",
    "wrap",
]
