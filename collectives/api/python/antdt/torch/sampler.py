"""Samplers fed by the job's DDS through the Agent (docs/torch.md, "Straggler tools").

The DDS (docs/dds.md) hands each rank the sample ids of its next local batch and
takes back what a step did not use, so every sample is trained on once per epoch
even when contributions are dropped, shards are re-split, local batches change
or ranks restart. The Agent drives the steps; these classes only fetch and
settle::

    sampler = DdsBatchSampler(agent)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=...)
    ...
    plan = agent.next_step()
    ids = sampler.fetch()              # this step's ids (maybe []), also what iter(loader) yields
    ...
    sampler.settle(fate)               # commit (included/deferred) or give back (dropped)

``DdsBatchSampler`` is a torch ``BatchSampler`` (one list of ids per step, empty
lists included: a rank without data still takes part with weight 0).
"""

import torch.utils.data

from antdt.agent import Fate


class DdsBatchSampler(torch.utils.data.Sampler):
    def __init__(self, agent):
        super().__init__(None)
        self.agent = agent
        self.batch = None          # the current step's SampleBatch
        self.epoch = 0
        self.committed = 0         # samples committed by this rank (this process)
        self.given_back = 0

    def fetch(self):
        """The current step's sample ids (call once per step, after agent.next_step())."""
        self.batch = self.agent.next_samples()
        self.epoch = self.batch.epoch
        return list(self.batch.samples)

    @property
    def finished(self):
        return self.batch is not None and self.batch.finished

    def settle(self, fate):
        """The step's fate: included/deferred commit the batch, dropped gives it back.
        Returns True when the samples were committed (counted as trained)."""
        if self.batch is None or len(self.batch) == 0:
            return False
        used = fate in (Fate.included, Fate.deferred)
        settled = self.agent.settle(fate)
        n = len(self.batch)
        self.batch = None
        if settled and used:
            self.committed += n
            return True
        if not used:
            self.given_back += n
        return False

    def __iter__(self):
        # One batch per step; the trainer calls agent.next_step() before each next().
        while True:
            ids = self.fetch()
            if self.batch.finished and not ids:
                return
            yield ids

    def __len__(self):
        raise TypeError("DdsBatchSampler has no length: the DDS decides how many steps an epoch takes")
