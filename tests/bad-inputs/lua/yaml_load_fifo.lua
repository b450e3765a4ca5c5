print(vram.yaml.load("lua/gen_fifo.yaml"))
