"""The recipe's optimizers, by name (``--optimizer``): AdamW (the protocol's) and SGD with momentum.

Each builder takes the run's trainable parameters and returns one optimizer over them (every parameter's update
and state is its own, so one optimizer is the same as one per group). Each registers the ``lr`` and
``weight_decay`` a config takes when it gives none (:meth:`TrainConfig.__post_init__` fills them in, so every
stored config names the values it ran with). The learning rate follows the recipe's cosine schedule to 0 either way.

* ``adamw`` — the published protocol's: torch's AdamW (β = 0.9, 0.999, ε = 1e-8, decoupled decay), lr 1e-3,
  weight decay 0.01; on the CPU torch's fused kernel where this torch has one (:func:`cpu_fused_adamw`).
* ``sgd`` — the field's other optimizer (biotorch's benchmark reports every method under SGD and Adam): torch's
  SGD, momentum 0.9, no Nesterov, dampening 0, *coupled* L2 decay; lr 3e-4, weight decay 5e-4 (ours: biotorch's
  schema leaves lr and decay to each config). The recipe rescales each block's credit to unit rms, so a block's
  gradient is not small where the loss is; SGD's lr is therefore far below the field's usual 0.1: on CIFAR-10 at
  the protocol's budget (reference ResMLP, 100 epochs) BP diverged at 3e-3 (epoch 10) and reached 59.3 % at 1e-3
  and 60.5 % at 3e-4 (AdamW: 60.8 %); on MNIST-1D (20 epochs) it diverged at 0.2, 0.05 and 0.01 and reached
  61.1 / 76.6 / 81.4 % at 3e-4 / 1e-3 / 3e-3. See docs/protocol.md "Optimizer". Kolen–Pollack's and product
  FA's feedback decay reads the same ``lr·wd``.
"""

import functools

import torch

from .registry import Registry

OPTIMIZERS: Registry = Registry("optimizer", meta_keys=("lr", "weight_decay"))


@OPTIMIZERS.register("adamw", lr=1e-3, weight_decay=0.01)
def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """Torch's AdamW over ``params`` as one group named ``trainable``; fused on the CPU where available."""
    fused = True if params and all(p.device.type == "cpu" for p in params) and cpu_fused_adamw() else None
    return torch.optim.AdamW([{"params": params, "name": "trainable"}], lr=lr, weight_decay=weight_decay, fused=fused)


@OPTIMIZERS.register("sgd", lr=3e-4, weight_decay=5e-4)
def sgd(params: list[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """Torch's SGD, momentum 0.9, Nesterov off, coupled weight decay, over ``params`` as one group."""
    return torch.optim.SGD([{"params": params, "name": "trainable"}], lr=lr, momentum=0.9, nesterov=False,
                           weight_decay=weight_decay)


def names() -> list[str]:
    """The registered optimizers (the ``--optimizer`` choices)."""
    return OPTIMIZERS.names()


@functools.lru_cache(maxsize=1)
def cpu_fused_adamw() -> bool:
    """Whether this torch has the fused AdamW kernel for CPU tensors (torch ≥ 2.4); older ones use the default."""
    try:
        t = torch.zeros(1)
        torch._fused_adamw_([t], [t.clone()], [t.clone()], [t.clone()], [], [torch.ones(())], amsgrad=False,
                            lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, maximize=False,
                            grad_scale=None, found_inf=None)
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return False
    return True
