# The base of the runtime image's CUDA variant where no nvidia/cuda image can be pulled (hack/images/build.sh):
# the local Debian base plus the settings nvidia/cuda's images carry for the NVIDIA container runtime, which
# then mounts the host's driver (libcuda, nvidia-smi). The CUDA libraries themselves (cudart, cuBLAS, cuDNN,
# NCCL) come with PyPI's torch wheels as nvidia-* packages.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64
