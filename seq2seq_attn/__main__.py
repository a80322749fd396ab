"""`python -m seq2seq_attn ...` (also what `torchrun -m seq2seq_attn train ...` runs)."""

from .cli import main

if __name__ == "__main__":
    main()
