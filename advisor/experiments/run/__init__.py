"""The run: interleaved blocks, the experiment use case around them, and a diagnosis's checks proved."""
