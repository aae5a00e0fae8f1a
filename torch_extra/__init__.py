"""The optional torch extra: the course's collectives and training on real processes.

Never imported by a notebook, the build or grading; PyTorch (``make torch``) is needed only
when a run starts, and it is imported then.

- :mod:`torch_extra.real_cluster`   N operating-system processes joined by torch.distributed
  (gloo), each with a :class:`~torch_extra.real_cluster.RealCluster`: the course's ring
  collectives, counting bytes and messages as the simulated ledger does
- :mod:`torch_extra.real_training`  lessons 029, 035 and 040 on those processes beside the
  simulated run (``make train-distributed``); the caller passes the reference solutions' lookup
- :mod:`torch_extra.notebook_functions`, :mod:`torch_extra.learner_training` and
  :mod:`torch_extra.first_difference`  the same with the learner's own 029, 035 and 040, read
  from their notebooks (``make train-distributed FROM=notebooks``), and where such a run first
  leaves the reference's

It builds on the helper package (:mod:`shared`) and on nothing above it: the reference
solutions come from the caller (``tools/train_distributed.py``, the tests).
"""
