"""Model parallelism, the hybrid grid and the parameter server: the trainer side of
perfmlp/model/strategies (what each strategy splits, computes and exchanges; docs/model.md derives the
bytes). build.py: what backend.build calls, and each rank's model group (the ranks sharing a batch
piece, one shard each) and data group (the ranks holding the same shard); shard.py: a shard's step,
Network's with an allreduce over the model group where partial sums must be combined; server.py:
`--comm ps`, `ps-nccl`. Collectives over a group of one rank are not called, so not counted."""
