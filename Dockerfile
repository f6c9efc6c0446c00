FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8
WORKDIR /app
# OCR of scans and text-less PDF pages (engines/ocr.py): Tesseract with Chinese and English.
RUN apt-get update && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# The ONNX export of the default embedding model (var/onnx) is made once here, not at each container start.
RUN DJANGO_SECRET_KEY=build DATABASE_URL=postgres://build@localhost/build REDIS_URL=redis://localhost/0 \
    python manage.py collectstatic --noinput \
    && python manage.py shell -c "from engines.embedders import get_embedder; get_embedder()" \
    && useradd --create-home app && mkdir -p var/originals && chown -R app var
USER app
EXPOSE 8000
