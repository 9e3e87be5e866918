import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { driPrimeTag, findDeviceSelectLayer, nvidiaPciAddresses, vulkanDeviceSelectEnv } from '../src/runner/vulkan-device-select.js';
import { useTempDirs } from './helpers.js';

describe('Vulkan GPU binding per rank', () => {
  const tempDir = useTempDirs();

  it('turns PCI addresses into the DRI_PRIME tags of the device-select layer', () => {
    expect(driPrimeTag('0000:00:06.0')).toBe('pci-0000_00_06_0');
    expect(driPrimeTag('00000000:1B:00.1')).toBe('pci-0000_1b_00_1');
    expect(() => driPrimeTag('GPU-5fd01b90')).toThrow('not a PCI address (domain:bus:slot.function): "GPU-5fd01b90"');
  });

  it("lists the driver's GPUs in index order and nothing on a machine without the driver", () => {
    const dir = tempDir('nvgpus-');
    for (const d of ['0000:00:07.0', '0000:00:06.0', 'README']) mkdirSync(join(dir, d));
    expect(nvidiaPciAddresses(dir)).toEqual(['0000:00:06.0', '0000:00:07.0']);
    expect(nvidiaPciAddresses(join(dir, 'missing'))).toEqual([]);
  });

  it('gives two ranks distinct GPUs, and refuses an index the driver does not list', () => {
    const pci = ['0000:00:06.0', '0000:00:07.0'];
    const a = vulkanDeviceSelectEnv(0, pci, { implicit: true });
    const b = vulkanDeviceSelectEnv(1, pci, { implicit: true });
    expect(a).toEqual({ DRI_PRIME: 'pci-0000_00_06_0', MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE: '1', REACTOR_GPU_PCI: '0000:00:06.0' });
    expect(b.DRI_PRIME).toBe('pci-0000_00_07_0');
    expect(() => vulkanDeviceSelectEnv(2, pci, { implicit: true })).toThrow(
      'GPU 2 has no PCI address: the NVIDIA driver lists 2 GPU(s) (0000:00:06.0, 0000:00:07.0) in /proc/driver/nvidia/gpus',
    );
  });

  it('enables a carried layer explicitly, keeping the layers already asked for', () => {
    const env = vulkanDeviceSelectEnv(
      0,
      ['0000:00:06.0'],
      { explicitDir: '/b/gpu/layer' },
      { VK_LAYER_PATH: '/x', VK_INSTANCE_LAYERS: 'VK_LAYER_KHRONOS_validation' },
    );
    expect(env['VK_LAYER_PATH']).toBe('/b/gpu/layer:/x');
    expect(env['VK_INSTANCE_LAYERS']).toBe('VK_LAYER_MESA_device_select:VK_LAYER_KHRONOS_validation');
  });

  it('finds the layer carried in REACTOR_VK_LAYER_PATH before an installed one', () => {
    const carried = tempDir('layer-');
    writeFileSync(join(carried, 'VkLayer_MESA_device_select.json'), '{}');
    const installed = tempDir('implicit-');
    expect(findDeviceSelectLayer({ REACTOR_VK_LAYER_PATH: carried }, [installed])).toEqual({ explicitDir: carried });
    expect(findDeviceSelectLayer({}, [installed])).toBeUndefined();
    writeFileSync(join(installed, 'VkLayer_MESA_device_select.json'), '{}');
    expect(findDeviceSelectLayer({}, [installed])).toEqual({ implicit: true });
  });
});

describe('rankEnvironment with a Vulkan binding', () => {
  it('binds each GPU rank to its own PCI address and leaves CPU ranks alone', async () => {
    const { rankEnvironment } = await import('../src/runner/devices.js');
    const vulkan = { pciAddresses: ['0000:00:06.0', '0000:00:07.0'], layer: { explicitDir: '/bundle/gpu/layer' } };
    const r0 = rankEnvironment({}, { rank: 0, device: 'gpu:0', gpuIndex: 0 }, 2, 29500, vulkan);
    const r1 = rankEnvironment({}, { rank: 1, device: 'gpu:1', gpuIndex: 1 }, 2, 29500, vulkan);
    expect([r0.DRI_PRIME, r1.DRI_PRIME]).toEqual(['pci-0000_00_06_0', 'pci-0000_00_07_0']);
    expect([r0.CUDA_VISIBLE_DEVICES, r1.CUDA_VISIBLE_DEVICES]).toEqual(['0', '1']);
    expect(r1.VK_INSTANCE_LAYERS).toBe('VK_LAYER_MESA_device_select');
    const cpu = rankEnvironment({}, { rank: 0, device: 'cpu', gpuIndex: null }, 1, 29500, vulkan);
    expect(cpu.DRI_PRIME).toBeUndefined();
    // The parent's CUDA_VISIBLE_DEVICES remaps indices: the PCI address follows the physical GPU.
    const remapped = rankEnvironment({ CUDA_VISIBLE_DEVICES: '1' }, { rank: 0, device: 'gpu:0', gpuIndex: 0 }, 1, 29500, vulkan);
    expect(remapped.DRI_PRIME).toBe('pci-0000_00_07_0');
  });
});
