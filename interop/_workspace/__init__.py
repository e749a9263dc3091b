"""The workspace manager: the façade, its engine, memo, buffers and allocators."""
