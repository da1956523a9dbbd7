# Dataflow worker image: the Beam SDK at the version setup.py pins, plus this project.
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/create-hdf5-dataset:latest .
#   create_hdf5_dataset ... --runner DataflowRunner --sdk_container_image <that tag>
FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /opt/create_hdf5_dataset
COPY setup.py README.md ./
COPY pipelines ./pipelines
COPY transforms ./transforms
COPY configs ./configs
# filters: spaCy's tokenizer, which --quality_filters splits words with (a job without them never imports it).
RUN pip install --no-cache-dir ".[gcp,filters]"

# The SDK harness boot binary must stay the entrypoint for Dataflow to start workers.
ENTRYPOINT ["/opt/apache/beam/boot"]
