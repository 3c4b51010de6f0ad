# The image the stacks' jobs run: Python, CPU (default) or CUDA PyTorch, scikit-learn and
# examples/. The trainplane agent is not baked in: DistributedJob mounts it from a ConfigMap.
# Build from the repository root:
#   docker build -t trainplane-examples:dev -f stacks/images/examples.Dockerfile .
FROM python:3.11-slim
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}" \
 && pip install --no-cache-dir "scikit-learn>=1.4"
WORKDIR /app
COPY examples/ examples/
