"""Synthetic image trees in the real layouts of DomainNet, ImageNet-R and ImageNet-C (tiny JPEGs): the package's
own writers (intact.data.synthetic), which the rehearsal prepares too."""

from intact.data.synthetic import WNIDS, domainnet, imagenet_c, imagenet_r, jpeg, write_list  # noqa: F401
