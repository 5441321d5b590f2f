"""One module per node; each has an offline implementation and, where a chat model helps, an LLM one."""
