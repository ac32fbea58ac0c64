"""The judgement: blocks in, one typed Judgement out; the only place a verdict is decided."""
